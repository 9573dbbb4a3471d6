//! Decisions made before compiling: how many jobs and how many nvcc threads. (Whether the
//! extension's own flags override the plan is decided where they reach nvcc: [`super::arch_guard`].)

/// Memory one nvcc job on torch headers needs, per nvcc thread, before anything was measured
/// (measured 1.5–3.5 GB; the model takes 2.5 GiB so that the peak of two heavy translation units
/// still fits): the same figure the memory pool reserves for a compile it has no peak of.
pub const GIB_PER_NVCC_JOB: f64 = crate::build_insight::peaks::FIRST_NVCC_GIB_PER_THREAD;
/// A C++ compile of torch headers (measured 1.5 GB; not measured per build-ext build: its C++
/// compiles do not pass through the arch guard).
pub const CXX_GIB: f64 = crate::build_insight::peaks::FIRST_CXX_GIB;
/// Memory kept free for the rest of the machine.
pub const RESERVE_GIB: f64 = 1.0;
/// Below this much free memory the import check (a Python with torch imported, ~0.5 GB) waits
/// for the compiles instead of running beside them.
pub const EARLY_IMPORT_CHECK_GIB: f64 = 8.0;

/// The memory pool of a build's compiles: what is free for builds now, less the reserve.
pub fn memory_budget_bytes(mem_available_gib: f64) -> u64 {
    crate::build_insight::memory_gate::Gate::budget_for(mem_available_gib, RESERVE_GIB)
}

/// Parallelism for one build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Parallelism {
    /// `MAX_JOBS`: concurrent compiler processes (ninja `-j`).
    pub jobs: u32,
    /// nvcc `--threads`: per-job threads, one arch each (1 = not set).
    pub nvcc_threads: u32,
    /// Extensions of one package built at once (1: setuptools' own one after another); see
    /// [`extensions_at_once`].
    pub extensions: u32,
    /// Why, in a few words.
    pub reason: &'static str,
}

impl Parallelism {
    /// A build in a pool it shares with others ([`super::job_pool`]): its compiles are the
    /// pool's slots (the jobserver decides how many run, so nvcc gets no `--threads`).
    pub fn in_pool(&mut self, pool: &super::job_pool::PoolShare) {
        self.jobs = pool.slots;
        self.nvcc_threads = 1;
        self.reason = "the slots of a pool shared with the builds beside it";
    }
}

/// How many of a package's extensions to build at once: one per core, as many as memory holds
/// (each may run an nvcc on torch headers). setuptools builds them one after another, each in a
/// ninja run of one or two files, so a many-extension package otherwise keeps one core busy. It is
/// also the size of the build hooks' one pool of job slots that every extension's ninja shares
/// (a jobserver): compiles never outnumber it, across all extensions.
pub fn extensions_at_once(cores: u32, mem_available_gib: f64) -> u32 {
    let by_mem = ((mem_available_gib - RESERVE_GIB) / GIB_PER_NVCC_JOB)
        .floor()
        .max(1.0) as u32;
    cores.max(1).min(by_mem)
}

/// The job slots of a pool several builds share ([`super::job_pool`]): as many compiles as one
/// build of many translation units would run, `min(cores + 2, memory / 2.5 GiB)`.
pub fn pool_slots(cores: u32, mem_available_gib: f64) -> u32 {
    parallelism(cores, mem_available_gib, u32::MAX, 0, 1, None).jobs
}

/// The model (measurements: docs/build-ext.md, "Jobs and nvcc threads"):
/// * `jobs = min(translation units, cores + 2, floor((MemAvailable − 1 GiB) / 2.5 GiB))`, at
///   least 1. `cores + 2` is ninja's own default, i.e. torch's when `MAX_JOBS` is unset: a few
///   more compiles than cores keep every core busy while some of them sit in a serial step, and
///   let a small build's units all finish together instead of the last one running alone. Memory
///   is what really bounds it: one nvcc or g++ job on torch headers takes 1.5–3 GB, and the
///   out-of-memory kill torch builds are known for is what `MAX_JOBS` is usually set by hand to
///   avoid. There is no point in more jobs than translation units.
/// * `nvcc --threads = min(images, ceil(cores / concurrent nvcc jobs), memory per nvcc job /
///   2.5 GiB)`: nvcc compiles each arch's device code (cicc + ptxas) in its own thread, so threads
///   pay when fewer .cu files run at once than there are cores (one .cu file; a .cu next to a
///   .cpp) and cost time when the cores are already full (more runnable threads than cores
///   thrash caches; measured in docs/build-ext.md's jobs table).
///
/// `jobs_override` (`--jobs`) replaces the computed job count; threads are then derived from it.
pub fn parallelism(
    cores: u32,
    mem_available_gib: f64,
    translation_units: u32,
    cu_files: u32,
    images: u32,
    jobs_override: Option<u32>,
) -> Parallelism {
    let units = (translation_units, cu_files, images);
    parallelism_for(
        cores,
        mem_available_gib,
        units,
        jobs_override,
        GIB_PER_NVCC_JOB,
    )
}

/// [`parallelism`] with the memory of one job per nvcc thread given: `GIB_PER_NVCC_JOB` on a
/// first build, the compiles' measured peaks once a build of the same sources kept them
/// ([`learned_gib_per_job`]). `units`: translation units, .cu files, images.
pub fn parallelism_for(
    cores: u32,
    mem_available_gib: f64,
    (translation_units, cu_files, images): (u32, u32, u32),
    jobs_override: Option<u32>,
    gib_per_job: f64,
) -> Parallelism {
    let cores = cores.max(1);
    let by_mem = ((mem_available_gib - RESERVE_GIB) / gib_per_job.max(0.05))
        .floor()
        .max(1.0) as u32;
    let (jobs, reason) = match jobs_override {
        Some(j) => (j.max(1), "--jobs"),
        None => {
            let units = translation_units.max(1);
            let by_cores = cores + 2;
            let j = by_cores.min(by_mem).min(units);
            let why = if j == units && units < by_cores.min(by_mem) {
                "one job per translation unit"
            } else if by_mem < by_cores {
                "limited by available memory"
            } else {
                "cores + 2, ninja's default"
            };
            (j.max(1), why)
        }
    };
    // Concurrent nvcc processes: the .cu files that can run at once.
    let nvcc_jobs = jobs.min(cu_files.max(1));
    let mem_threads = (by_mem / nvcc_jobs).max(1);
    let threads = if cu_files == 0 {
        1
    } else {
        images
            .max(1)
            .min(cores.div_ceil(nvcc_jobs))
            .min(mem_threads)
    };
    Parallelism {
        jobs,
        nvcc_threads: threads,
        extensions: extensions_at_once(cores, mem_available_gib),
        reason,
    }
}

/// What one job needs per nvcc thread by the peaks kept from an earlier build of these sources
/// for this plan (`plan_flags`, `images` archs), with the pool's headroom: the largest over the
/// .cu files, at least `cxx_gib` where there are C++ units too (their peaks are not measured).
/// None unless every .cu file's peak is known.
pub fn learned_gib_per_job(
    kept: &crate::build_insight::peaks::Peaks,
    cu_files: &[std::path::PathBuf],
    plan_flags: &[String],
    images: u32,
    cxx_gib: Option<f64>,
) -> Option<f64> {
    use crate::build_insight::peaks;
    if cu_files.is_empty() {
        return None;
    }
    let mut worst: f64 = 0.0;
    for f in cu_files {
        let hash = crate::stamp::hash_file(f).ok()?;
        let per_thread = (1..=images.max(1))
            .filter_map(|t| {
                let mut sizing = plan_flags.to_vec();
                sizing.push(format!("--threads={t}"));
                let k = kept.get(&peaks::key("nvcc", &hash, &sizing))?;
                Some(k.peak_rss_bytes as f64 / f64::from(t))
            })
            .reduce(f64::max)?;
        worst = worst.max(per_thread);
    }
    let gib = worst * peaks::HEADROOM / (1024.0 * 1024.0 * 1024.0);
    Some(gib.max(cxx_gib.unwrap_or(0.0)))
}

/// Counts `.cu` files and C++/CUDA translation units under `root` (skipping build outputs).
pub fn count_sources(files: &[std::path::PathBuf]) -> (u32, u32) {
    let ext = |p: &std::path::PathBuf| {
        p.extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_string()
    };
    let cu = files.iter().filter(|p| ext(p) == "cu").count() as u32;
    let units = files
        .iter()
        .filter(|p| matches!(ext(p).as_str(), "cu" | "cpp" | "cc" | "cxx" | "c"))
        .count() as u32;
    (units, cu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_peaks_replace_the_first_build_figure_once_every_cu_file_has_one() {
        use crate::build_insight::peaks::{key, Kept, Peaks};
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a.cu"), d.path().join("b.cu"));
        std::fs::write(&a, "__global__ void a() {}").unwrap();
        std::fs::write(&b, "__global__ void b() {}").unwrap();
        let plan = vec!["-gencode=arch=compute_75,code=sm_75".to_string()];
        let mut kept = Peaks::default();
        let keep = |kept: &mut Peaks, f: &std::path::Path, threads: u32, mib: u64| {
            let mut sizing = plan.clone();
            sizing.push(format!("--threads={threads}"));
            let k = key("nvcc", &crate::stamp::hash_file(f).unwrap(), &sizing);
            kept.compiles.insert(
                k,
                Kept {
                    peak_rss_bytes: mib << 20,
                    seconds: 1.0,
                    file: String::new(),
                    measured_at: 0,
                },
            );
        };
        keep(&mut kept, &a, 1, 400);
        let files = [a.clone(), b.clone()];
        assert_eq!(
            learned_gib_per_job(&kept, &files, &plan, 1, None),
            None,
            "b.cu unknown"
        );
        keep(&mut kept, &b, 1, 800);
        let gib = learned_gib_per_job(&kept, &files, &plan, 1, None).unwrap();
        assert!((gib - 800.0 * 1.15 / 1024.0).abs() < 1e-9, "{gib}");
        // C++ units beside them keep their floor.
        assert_eq!(
            learned_gib_per_job(&kept, &files, &plan, 1, Some(CXX_GIB)),
            Some(CXX_GIB)
        );
        // 6 GiB free: 2 jobs by the first-build figure, 5 by the peaks measured (0.9 GiB).
        assert_eq!(parallelism(8, 6.0, 8, 8, 1, None).jobs, 2);
        assert_eq!(parallelism_for(8, 6.0, (8, 8, 1), None, gib).jobs, 5);
    }

    #[test]
    fn jobs_follow_memory_cores_and_units() {
        // 2 cores, plenty of memory, two .cu + one .cpp (the benchmark's fixture), 3 archs: all
        // three units at once, and no threads: the cores are full.
        let p = parallelism(2, 20.0, 3, 2, 3, None);
        assert_eq!((p.jobs, p.nvcc_threads), (3, 1));
        assert_eq!(p.reason, "one job per translation unit");
        // One .cu + one .cpp on 2 cores: the .cu runs alone once the .cpp is done: 2 threads.
        let p = parallelism(2, 20.0, 2, 1, 3, None);
        assert_eq!((p.jobs, p.nvcc_threads), (2, 2));
        // One .cu file for 7.5, 8.9, 9.0+PTX on 2 cores (the case): 2 threads.
        assert_eq!(parallelism(2, 20.0, 1, 1, 4, None).nvcc_threads, 2);
        // 16 cores, 3 .cu files, 4 images: 6 cores each, one thread per image.
        let p = parallelism(16, 64.0, 3, 3, 4, None);
        assert_eq!((p.jobs, p.nvcc_threads), (3, 4));
        // Many units: ninja's cores + 2.
        let p = parallelism(4, 64.0, 40, 30, 3, None);
        assert_eq!(
            (p.jobs, p.nvcc_threads, p.reason),
            (6, 1, "cores + 2, ninja's default")
        );
        // 16 cores but 6 GiB: memory caps jobs at 2, and leaves one thread each.
        let p = parallelism(16, 6.0, 40, 30, 3, None);
        assert_eq!((p.jobs, p.nvcc_threads), (2, 1));
        assert_eq!(p.reason, "limited by available memory");
        // One arch: nothing for threads to split.
        assert_eq!(parallelism(4, 64.0, 1, 1, 1, None).nvcc_threads, 1);
        // No CUDA at all: never threads.
        assert_eq!(parallelism(8, 64.0, 3, 0, 3, None).nvcc_threads, 1);
        // --jobs wins; threads derive from it.
        let p = parallelism(8, 64.0, 8, 8, 4, Some(2));
        assert_eq!((p.jobs, p.nvcc_threads, p.reason), (2, 4, "--jobs"));
        // --jobs in memory's way: threads shrink, jobs do not.
        assert_eq!(parallelism(8, 11.0, 8, 8, 4, Some(4)).nvcc_threads, 1);
        // Tiny memory still gives one job.
        assert_eq!(parallelism(8, 0.5, 8, 8, 3, None).jobs, 1);
        // Extensions at once: one per core, within memory.
        assert_eq!(extensions_at_once(2, 20.0), 2);
        assert_eq!(extensions_at_once(16, 6.0), 2);
        assert_eq!(extensions_at_once(4, 0.5), 1);
    }
}
