//! CUDA 11.x/12.x toolkits from Debian's archive, no root and no apt: CUDA 12.4 from trixie and
//! 11.8 from bookworm (with bookworm's g++-11 as nvcc's host compiler where the machine's g++ is
//! newer than 11.8 accepts), each installed once into archsmith's shared cache; their packages
//! checked against the signed index they were resolved from (kept in the cache, its signature
//! checked again; against today's index in the live tier); kernels compiled for sm_75/89/90 and
//! read back by archsmith's reader and by the toolkit's own cuobjdump; a forged index, a tampered
//! Packages file and a corrupted .deb refused. With the cache warm nothing here reads the network
//! but the live tier (`cargo test -- --ignored`).

use archsmith::downloads::deb_file::{self, Expected};
use archsmith::downloads::debian_archive::{self, Suite};
use archsmith::kb::kb;
use archsmith::process::Cmd;
use archsmith::toolchain::{self, debian_packages, Source, Toolchain};
use archsmith::version::Version;
use std::path::Path;

const XTASK: &str = env!("CARGO_BIN_EXE_xtask");

fn v(s: &str) -> Version {
    s.parse().unwrap()
}

/// archsmith's CUDA `cuda` from Debian's archive, installed on first use.
fn archive_toolkit(cuda: &str) -> Toolchain {
    let tc = toolchain::ensure(&v(cuda))
        .unwrap_or_else(|e| panic!("installing CUDA {cuda} from Debian's archive: {e:#}"));
    assert!(
        matches!(&tc.source, Source::Debian { .. }),
        "CUDA {cuda} came from {:?}, not Debian's archive (a system toolkit of {cuda} would be used first: this test wants archsmith's)",
        tc.source
    );
    tc
}

/// Where the index comes from: the copy kept when the toolkit was installed, or today's.
#[derive(Clone, Copy)]
enum IndexRead {
    Kept,
    Live,
}

/// The installed packages are the knowledge base's closure, each the very file the suite's
/// signed index lists (version, size, sha256), pinned by the relation the lock names.
fn check_closure_against_the_index(tc: &Toolchain, read: IndexRead) {
    let lock = debian_packages::read_lock(tc.cuda_home()).unwrap();
    let row = kb().debian_archive_toolkit(&tc.cuda).unwrap();
    let names: Vec<&str> = lock
        .packages
        .iter()
        .map(|p| p.package.name.as_str())
        .collect();
    let mut want: Vec<&str> = row.closure.iter().map(String::as_str).collect();
    if lock
        .host_compiler
        .as_deref()
        .is_some_and(|h| h.starts_with("Debian"))
    {
        want.extend(row.host_compiler.iter().map(String::as_str));
    }
    assert_eq!(names, want);
    let suite = Suite::new(row.suite.as_deref().unwrap()).unwrap();
    let index = match read {
        IndexRead::Kept => suite.index_kept(&row.components).unwrap(),
        IndexRead::Live => suite.index(&row.components, &mut |_| {}).unwrap(),
    };
    assert_eq!(index.fingerprint, lock.signed_by);
    for p in lock.packages.iter().map(|l| &l.package) {
        let r = index
            .records
            .iter()
            .find(|r| r.name == p.name && r.version == p.version)
            .unwrap_or_else(|| panic!("{} {} is not in the index", p.name, p.version));
        assert_eq!((r.size, &r.sha256), (p.size, &p.sha256), "{}", p.name);
        assert_eq!(p.sha256.len(), 64);
    }
    for p in &lock.packages {
        assert!(p.kept_files > 0, "{} kept nothing", p.package.name);
    }
    assert_eq!(lock.packages[0].required_by, None);
    let roots: Vec<&str> = lock
        .packages
        .iter()
        .filter(|p| p.required_by.is_none())
        .map(|p| p.package.name.as_str())
        .collect();
    let host_root = row.host_compiler.first().map(String::as_str);
    assert!(
        roots
            .iter()
            .all(|r| *r == row.closure[0] || Some(*r) == host_root),
        "{roots:?}"
    );
}

/// nvcc compiles a kernel for sm_75, sm_89 and sm_90; archsmith's reader and the toolkit's own
/// cuobjdump find exactly those three cubins in the object.
fn compiles_exactly_three_archs(tc: &Toolchain) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("k.cu");
    std::fs::write(
        &src,
        "#include <cub/cub.cuh>\n__global__ void k(float *x) { x[threadIdx.x] += 1.0f; }\n",
    )
    .unwrap();
    let obj = dir.path().join("k.o");
    let mut nvcc = tc.cmd(tc.nvcc()).arg("-c").arg(&src).arg("-o").arg(&obj);
    for a in [75, 89, 90] {
        nvcc = nvcc.arg(format!("-gencode=arch=compute_{a},code=sm_{a}"));
    }
    nvcc.read().unwrap();
    let audit = archsmith::binary::audit_elf(&std::fs::read(&obj).unwrap()).unwrap();
    let ours: Vec<String> = audit
        .counted()
        .unwrap()
        .counts(archsmith::binary::Kind::Elf)
        .keys()
        .map(|a| format!("sm_{a}"))
        .collect();
    assert_eq!(ours, ["sm_75", "sm_89", "sm_90"]);
    let listed = Cmd::new(tc.cuobjdump())
        .arg("--list-elf")
        .arg(&obj)
        .read()
        .unwrap();
    let mut theirs: Vec<String> = listed
        .lines()
        .filter_map(|l| l.rsplit('.').nth(1).map(str::to_string))
        .collect();
    theirs.sort();
    assert_eq!(theirs, ours, "cuobjdump --list-elf:\n{listed}");
}

#[test]
fn installs_cuda_12_4_from_trixie_as_a_working_cuda_home() {
    let tc = archive_toolkit("12.4");
    let reported = toolchain::nvcc_version(&tc.nvcc()).unwrap();
    assert_eq!(reported.release, v("12.4"));
    assert_eq!(reported.full, tc.nvcc_version);
    for rel in debian_packages::REQUIRED {
        assert!(tc.cuda_home().join(rel).exists(), "{rel} missing");
    }
    let lock = debian_packages::read_lock(tc.cuda_home()).unwrap();
    // The ceiling read from this toolkit's own host_config.h is the knowledge base's for 12.4.
    let limits = kb()
        .cuda_row(&v("12.4"))
        .unwrap()
        .host_compiler_limits(&v("12.4"));
    assert_eq!(
        (lock.max_gcc, lock.max_clang),
        (limits.max_gcc, limits.max_clang)
    );
    assert_eq!(lock.verified_sass, ["sm_75", "sm_89", "sm_90"]);
    // NVIDIA's glibc 2.41 fix backported into this copy of 12.4's headers, which still compile
    // on this glibc (the kernels below; on trixie's glibc 2.41 docs/toolchain.md).
    assert_eq!(lock.patched.len(), 1, "{:?}", lock.patched);
    let header =
        std::fs::read_to_string(tc.cuda_home().join(toolchain::glibc_math::DECLARATIONS)).unwrap();
    assert!(header.contains("cospi(double x) __NV_IEC_60559_FUNCS_EXCEPTION_SPECIFIER;"));
    check_closure_against_the_index(&tc, IndexRead::Kept);
    compiles_exactly_three_archs(&tc);

    // The warm path: the same toolkit, and nothing to download (offline below); its speed is a
    // benchmark's to measure, not a test's (a loaded machine would fail a time bound).
    let again = toolchain::ensure(&v("12.4")).unwrap();
    assert_eq!(again.cuda_home, tc.cuda_home);
    let offline = Cmd::new(XTASK)
        .env("ARCHSMITH_OFFLINE", "1")
        .args(["toolchain", "install", "--cuda", "12.4", "--json"])
        .read()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_str(&offline).unwrap();
    assert_eq!(doc["toolchain"]["source"]["kind"], "debian");
    assert_eq!(doc["debian_lock"]["suite"], "trixie");
    assert_eq!(
        doc["debian_lock"]["packages"][0]["name"],
        "nvidia-cuda-toolkit"
    );
}

#[test]
fn installs_cuda_11_8_from_bookworm_with_a_host_compiler_it_accepts() {
    let tc = archive_toolkit("11.8");
    let lock = debian_packages::read_lock(tc.cuda_home()).unwrap();
    assert_eq!(lock.max_gcc, Some(11));
    let host_gcc = archsmith::host::cxx_compilers()
        .into_iter()
        .find(|c| c.name == "g++")
        .and_then(|c| c.major());
    if host_gcc.is_some_and(|m| m > 11) {
        let host = lock
            .host_compiler
            .as_deref()
            .expect("a host compiler nvcc 11.8 accepts");
        assert!(host.contains("g++-"), "{host}");
        // nvcc's gcc is that compiler, through the wrappers only its profile puts on a PATH.
        let wrapper = tc.cuda_home().join(debian_packages::HOST_BIN).join("g++");
        let version = Cmd::new(&wrapper).arg("-dumpversion").read().unwrap();
        assert!(
            version.trim().parse::<Version>().unwrap().major() <= 11,
            "{version}"
        );
        assert!(
            !tc.bin_dir().join("g++").exists(),
            "the user's PATH must not get it"
        );
    }
    check_closure_against_the_index(&tc, IndexRead::Kept);
    compiles_exactly_three_archs(&tc);
}

/// The live twin of the checks above: today's signed index still lists each installed package
/// as the lock pinned it. A new upload to Debian's archive fails this, not the default tier.
#[test]
#[ignore = "live tier: reads Debian's archive as it is today; cargo test -- --ignored"]
fn the_installed_closures_are_the_files_todays_index_lists() {
    for cuda in ["12.4", "11.8"] {
        check_closure_against_the_index(&archive_toolkit(cuda), IndexRead::Live);
    }
}

/// `libcudart12`'s .deb, downloaded once into the cache and read from there (its size and sha256
/// are checked against the signed index's record by the extraction itself).
fn kept_deb(suite: &Suite, r: &debian_archive::Record) -> Vec<u8> {
    let kept = archsmith::paths::cache_dir()
        .join("test-data")
        .join(r.filename.rsplit('/').next().unwrap());
    if let Ok(bytes) = std::fs::read(&kept) {
        if bytes.len() as u64 == r.size {
            return bytes;
        }
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut suite.open(&r.filename).unwrap(), &mut bytes).unwrap();
    archsmith::cache::store(&kept, &bytes).unwrap();
    bytes
}

#[test]
fn a_forged_index_a_tampered_packages_file_and_a_corrupted_deb_are_refused() {
    // The installs above leave the verified index in the cache; read it again from there.
    let row = kb().debian_archive_toolkit(&v("12.4")).unwrap();
    let suite = Suite::new(row.suite.as_deref().unwrap()).unwrap();
    let _ = archive_toolkit("12.4");
    let index = suite.index_kept(&row.components).unwrap();
    let cache = archsmith::paths::cache_dir()
        .join("debian-archive")
        .join("trixie");
    let dir = tempfile::tempdir().unwrap();

    // One letter of the signed text changed: gpgv refuses the signature.
    let signed = std::fs::read_to_string(cache.join("InRelease")).unwrap();
    let forged = dir.path().join("InRelease");
    std::fs::write(
        &forged,
        signed.replacen("Codename: trixie", "Codename: trixiE", 1),
    )
    .unwrap();
    let e = debian_archive::verify_signature(&forged, &Suite::keyring(), dir.path())
        .unwrap_err()
        .to_string();
    assert!(e.contains("gpgv refused the signature"), "{e}");

    // A Packages.xz one byte off: not the file the signed Release lists.
    let path = format!("non-free/binary-{}/Packages.xz", suite.arch);
    let mut packages = std::fs::read(cache.join(path.replace('/', "_"))).unwrap();
    index.release.check(&path, &packages).unwrap();
    let mid = packages.len() / 2;
    packages[mid] ^= 1;
    let e = index
        .release
        .check(&path, &packages)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("is not the file the signed Release lists"),
        "{e}"
    );

    // A real package (libcudart12, from the archive) unpacks; with one byte flipped it is refused.
    let r = index
        .records
        .iter()
        .find(|r| r.name == "libcudart12")
        .unwrap();
    let mut bytes = kept_deb(&suite, r);
    let what = format!("{} {}", r.name, r.version);
    let expected = Expected {
        what: &what,
        size: r.size,
        sha256: &r.sha256,
    };
    let triple = debian_archive::debian_arch().unwrap().1;
    let map = |p: &str| debian_packages::map_path(p, triple);
    let good = dir.path().join("good");
    let got = deb_file::extract(&bytes[..], &expected, &map, &good, &mut |_| {}).unwrap();
    assert_eq!(got.kept_files, 2, "libcudart.so.12 and its target");
    assert!(good.join("lib64").read_dir().unwrap().count() == 2);
    let at = bytes.len() - 1000;
    bytes[at] ^= 0x40;
    let e = format!(
        "{:#}",
        deb_file::extract(
            &bytes[..],
            &expected,
            &map,
            &dir.path().join("bad"),
            &mut |_| {}
        )
        .unwrap_err()
    );
    assert!(
        e.contains("libcudart12")
            && e.contains("is not the package the signed index lists")
            && e.contains("refusing it"),
        "{e}"
    );
}

#[test]
fn offline_with_nothing_cached_says_what_to_do_and_leaves_nothing() {
    let home = tempfile::tempdir().unwrap();
    let out = Cmd::new(XTASK)
        .env("ARCHSMITH_HOME", home.path())
        .env("ARCHSMITH_OFFLINE", "1")
        .env_remove("CUDA_HOME")
        .env_remove("CUDA_PATH")
        .env("PATH", "/usr/bin:/bin")
        .args(["toolchain", "install", "--cuda", "12.4"])
        .output()
        .unwrap();
    assert_eq!(out.status, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("Debian trixie's nvidia-cuda-toolkit")
            && out.stderr.contains("offline"),
        "{}",
        out.stderr
    );
    let toolchains = home.path().join("toolchains");
    let left: Vec<_> = std::fs::read_dir(&toolchains)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| !n.to_string_lossy().ends_with(".lock"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(!Path::new(&toolchains).join("cuda-12.4").exists());
}
