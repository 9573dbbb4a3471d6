//! User-facing arch specs → a [`Plan`]: what to export and what nvcc will build.
//!
//! The grammar is a superset of torch's: `,`, `;` and whitespace all separate; elements are `X.Y`,
//! `X.Ya`, `X.Yf`, `sm_XY[a|f]`, or a named family (`Hopper`, any case), each optionally `+PTX`.
//! Names expand as torch's cpp_extension expands them for the chosen torch release. The plan's
//! exported `TORCH_CUDA_ARCH_LIST` is always explicit numbers, so torch's Python and CMake parsers —
//! which expand names differently — build the same thing from it.
//!
//! Validation is against the knowledge base: every arch must be accepted by the chosen torch (its
//! cpp_extension table; `f` only by its CMake from 2.9) and compiled by the chosen CUDA's nvcc.

use crate::arch::compat::Image;
use crate::arch::{torch_flags, Arch, Variant};
use crate::kb::kb;
use crate::version::Version;

/// One planned target: SASS for `arch`, plus PTX for it when `ptx`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Target {
    pub arch: Arch,
    pub ptx: bool,
}

impl Target {
    /// Its nvcc flags as `_get_cuda_arch_flags` writes them: `-gencode=arch=compute_XY,code=sm_XY`,
    /// and `code=compute_XY` too for PTX.
    pub fn gencode(&self) -> Vec<String> {
        let n = self.arch.number();
        let mut flags = vec![format!("-gencode=arch=compute_{n},code=sm_{n}")];
        if self.ptx {
            flags.push(format!("-gencode=arch=compute_{n},code=compute_{n}"));
        }
        flags
    }
}

/// `9.0+PTX` or `7.5`: the element as TORCH_CUDA_ARCH_LIST writes it.
impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.arch, if self.ptx { "+PTX" } else { "" })
    }
}

/// An `--arch` value, checked for form where it is typed (clap's value parser, so a typo is an
/// exit-2 usage error before any work): every element a number (`8.9`, `9.0a`, `sm_90`, each
/// optionally `+PTX`) or a word that may name a family (`Hopper`). What a torch release and an
/// nvcc accept, and what a name expands to, is decided by [`Plan::parse`] once they are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchSpec(String);

impl ArchSpec {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for ArchSpec {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ArchSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for ArchSpec {
    type Err = SpecError;
    fn from_str(spec: &str) -> Result<ArchSpec, SpecError> {
        let tokens = spec_tokens(spec);
        if tokens.is_empty() {
            return Err(SpecError::Empty);
        }
        for token in tokens {
            let (body, _) = split_ptx(token);
            let bad = |why: String| SpecError::BadToken {
                token: crate::kb::user_input::echo(token),
                why,
            };
            match parse_number(body) {
                Some(Err(why)) => return Err(bad(why)),
                Some(Ok(_)) => {}
                None if body.starts_with(|c: char| c.is_ascii_alphabetic())
                    && body
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '_')) => {}
                None => return Err(bad(FORMS.to_string())),
            }
        }
        Ok(ArchSpec(spec.to_string()))
    }
}

/// The elements of a spec: `,`, `;` and whitespace all separate.
fn spec_tokens(spec: &str) -> Vec<&str> {
    spec.split(|c: char| c == ',' || c == ';' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .collect()
}

/// The versions a plan is checked against, and whether the user chose them.
#[derive(Clone, Debug)]
pub struct PlanContext {
    pub torch: Version,
    pub cuda: Version,
    pub torch_assumed: bool,
    pub cuda_assumed: bool,
    /// No CUDA was given and the torch release's default variant on PyPI was taken (`cu124` for
    /// torch 2.6): the CUDA that release is built with, not the newest one.
    pub cuda_from_torch: bool,
}

impl PlanContext {
    /// `--torch`/`--cuda` if given. Without `--cuda`, a given torch release brings its CUDA: its
    /// `+cuXYZ` build's, else its default PyPI variant's; otherwise the newest releases the
    /// knowledge base knows are assumed.
    pub fn new(torch: Option<Version>, cuda: Option<Version>) -> PlanContext {
        let from_torch = match (&torch, &cuda) {
            (Some(t), None) => crate::kb::user_input::variant_cuda(t)
                .or_else(|| kb().torch_row(t).and_then(|r| r.pypi_cuda.clone())),
            _ => None,
        };
        PlanContext {
            torch_assumed: torch.is_none(),
            cuda_assumed: cuda.is_none() && from_torch.is_none(),
            cuda_from_torch: from_torch.is_some(),
            torch: torch.unwrap_or_else(|| kb().releases.newest_torch.clone()),
            cuda: cuda
                .or(from_torch)
                .unwrap_or_else(|| kb().releases.newest_cuda.clone()),
        }
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Plan {
    /// Sorted by (major, minor, variant), one entry per arch.
    pub targets: Vec<Target>,
    /// Notes about the input worth showing (names expanded, duplicates merged, consumers that differ).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error(
        "empty arch spec: give the archs to build, e.g. --arch 7.5,8.9,9.0 (see `{} archs --help`)",
        crate::output::program()
    )]
    Empty,
    #[error("`{token}` is not an arch: {why}")]
    BadToken { token: String, why: String },
    #[error("{0}")]
    Unsupported(String),
}

const FORMS: &str = "expected X.Y, X.Ya, X.Yf or sm_XY, optionally with +PTX, or a family name";

impl Plan {
    /// Parses and validates `spec` against the chosen torch and CUDA.
    pub fn parse(ctx: &PlanContext, spec: &str) -> Result<Plan, SpecError> {
        let plan = Plan::parse_unvalidated(ctx, spec)?;
        plan.validate(ctx)?;
        Ok(plan)
    }

    /// Parses `spec` (names expanded for `ctx.torch`) without checking what torch and nvcc accept.
    pub fn parse_unvalidated(ctx: &PlanContext, spec: &str) -> Result<Plan, SpecError> {
        let tokens = spec_tokens(spec);
        if tokens.is_empty() {
            return Err(SpecError::Empty);
        }
        let names = kb()
            .torch_arch_list(&ctx.torch)
            .map(|r| r.named.as_slice())
            .unwrap_or(&[]);
        let mut targets: Vec<Target> = Vec::new();
        let mut notes = Vec::new();
        // Each arch's mentions (directly or through a name), and each name's: a spec that repeats
        // one 25,000 times gets one note with the count, not 25,000 identical lines.
        let mut mentions: Vec<(Arch, usize)> = Vec::new();
        let mut names_used: Vec<(String, usize)> = Vec::new();
        for token in tokens {
            let (body, ptx) = split_ptx(token);
            if let Some(arch) = parse_number(body) {
                let arch = arch.map_err(|why| SpecError::BadToken {
                    token: token.to_string(),
                    why,
                })?;
                add_target(Target { arch, ptx }, &mut targets, &mut mentions);
                continue;
            }
            if let Some((name, expansion)) =
                names.iter().find(|(n, _)| n.eq_ignore_ascii_case(body))
            {
                for element in expansion.split(';') {
                    let (num, eptx) = split_ptx(element);
                    let arch: Arch = num.parse().map_err(|e: crate::arch::ArchParseError| {
                        SpecError::Unsupported(format!("knowledge base: {e}"))
                    })?;
                    add_target(Target { arch, ptx: eptx }, &mut targets, &mut mentions);
                }
                if let Some(seen) = names_used.iter_mut().find(|(n, _)| n == name) {
                    seen.1 += 1;
                    continue;
                }
                names_used.push((name.clone(), 1));
                let mut note = format!(
                    "{name} = {expansion} (torch {}'s cpp_extension expansion",
                    ctx.torch
                );
                if ptx {
                    note.push_str(
                        "; names already include PTX for their newest arch, so +PTX adds nothing",
                    );
                }
                note.push(')');
                notes.push(note);
                continue;
            }
            return Err(SpecError::BadToken {
                token: token.to_string(),
                why: explain_unknown(body, names),
            });
        }
        for (name, n) in names_used.iter().filter(|(_, n)| *n > 1) {
            notes.push(format!("{name} listed {n} times; merged"));
        }
        for (arch, n) in mentions.iter().filter(|(_, n)| *n > 1) {
            notes.push(format!("{arch} listed {n} times; merged"));
        }
        targets.sort_by_key(|t| t.arch);
        Ok(Plan { targets, notes })
    }

    fn validate(&self, ctx: &PlanContext) -> Result<(), SpecError> {
        let mut problems = Vec::new();
        let torch_row = kb().torch_arch_list(&ctx.torch);
        let cmake_row = kb().torch_cmake_arch_list(&ctx.torch);
        if torch_row.is_none() {
            let known: Vec<String> = kb()
                .torch_arch_lists
                .iter()
                .map(|r| format!("{}–{}", r.from, r.to))
                .collect();
            return Err(SpecError::Unsupported(format!(
                "archsmith knows no TORCH_CUDA_ARCH_LIST rules for torch {}; known releases: {}. Pass one of those with --torch",
                ctx.torch,
                known.join(", ")
            )));
        }
        for t in &self.targets {
            let a = t.arch;
            let by_torch = match a.variant {
                Variant::FamilySpecific => cmake_row.is_some_and(|r| r.accepts_family_specific()),
                _ => torch_row.is_some_and(|r| r.supported.iter().any(|s| *s == a.to_string())),
            };
            if !by_torch {
                let ranges = kb().torch_ranges_accepting(a);
                let supported = if ranges.is_empty() {
                    match a.variant {
                        Variant::FamilySpecific => "no torch release's cpp_extension accepts `f` targets; torch's CMake accepts them from 2.9".to_string(),
                        _ => "no torch release accepts it".to_string(),
                    }
                } else {
                    format!(
                        "torch {} accept it",
                        ranges
                            .iter()
                            .map(|(f, t)| if f == t {
                                f.to_string()
                            } else {
                                format!("{f}–{t}")
                            })
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                };
                problems.push(format!("{a} is not accepted by torch {} ({supported}); choose a torch that accepts it with --torch, or drop {a}", ctx.torch));
            }
            if !kb().cuda_supports(&ctx.cuda, a) {
                let range = match kb().target(a) {
                    Some(row) => match &row.last_cuda {
                        Some(last) => format!(
                            "nvcc compiles {} from CUDA {} through {}",
                            a.sm(),
                            row.first_cuda,
                            last
                        ),
                        None => format!("nvcc compiles {} from CUDA {}", a.sm(), row.first_cuda),
                    },
                    None => format!("no CUDA release compiles {}", a.sm()),
                };
                let fix = match kb().target(a) {
                    Some(row) if row.first_cuda > ctx.cuda => {
                        format!("use --cuda {} or newer", row.first_cuda)
                    }
                    Some(row) => match &row.last_cuda {
                        Some(last) => {
                            format!("use --cuda {last} or older (a system toolkit), or drop {a}")
                        }
                        None => format!("drop {a}"),
                    },
                    None => format!("drop {a}"),
                };
                problems.push(format!(
                    "{a} is not supported by CUDA {} ({range}); {fix}",
                    ctx.cuda
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(SpecError::Unsupported(problems.join("\n")))
        }
    }

    /// The value to export as `TORCH_CUDA_ARCH_LIST`: explicit numbers joined by `;`.
    pub fn torch_cuda_arch_list(&self) -> String {
        self.targets
            .iter()
            .map(Target::to_string)
            .collect::<Vec<_>>()
            .join(";")
    }

    /// nvcc flags exactly as `_get_cuda_arch_flags` emits them for [`Self::torch_cuda_arch_list`]:
    /// `-gencode=arch=compute_XY,code=sm_XY` (+ `code=compute_XY` for PTX), byte-wise sorted.
    /// `f` targets (which torch's Python rejects) are written in the same form.
    pub fn gencode(&self) -> Vec<String> {
        let mut flags: Vec<String> = self.targets.iter().flat_map(Target::gencode).collect();
        flags.sort();
        flags.dedup();
        flags
    }

    pub fn sass(&self) -> Vec<Arch> {
        self.targets.iter().map(|t| t.arch).collect()
    }

    pub fn ptx(&self) -> Vec<Arch> {
        self.targets
            .iter()
            .filter(|t| t.ptx)
            .map(|t| t.arch)
            .collect()
    }

    /// Every image the build will contain, for runs-on verdicts and binary audits.
    pub fn images(&self) -> Vec<Image> {
        self.sass()
            .into_iter()
            .map(Image::sass)
            .chain(self.ptx().into_iter().map(Image::ptx))
            .collect()
    }

    /// `CMAKE_CUDA_ARCHITECTURES`: `75-real` for SASS only, `90` for SASS + PTX.
    pub fn cmake_cuda_architectures(&self) -> String {
        self.targets
            .iter()
            .map(|t| {
                if t.ptx {
                    t.arch.number()
                } else {
                    format!("{}-real", t.arch.number())
                }
            })
            .collect::<Vec<_>>()
            .join(";")
    }

    pub fn has_family_targets(&self) -> bool {
        self.targets
            .iter()
            .any(|t| t.arch.variant == Variant::FamilySpecific)
    }
}

/// How each of torch's consumers reads a spec string as written, and the exported list.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ConsumerReport {
    pub consumer: &'static str,
    pub accepts_input: bool,
    pub input_detail: String,
    pub accepts_exported: bool,
    pub exported_detail: String,
}

pub fn consumer_reports(ctx: &PlanContext, input: &str, plan: &Plan) -> Vec<ConsumerReport> {
    let exported = plan.torch_cuda_arch_list();
    let py = |s: &str| torch_flags::cpp_extension_flags(&ctx.torch, Some(s));
    let cm = |s: &str| torch_flags::cmake_flags(&ctx.torch, s);
    let describe = |r: Result<Vec<String>, torch_flags::TorchFlagsError>| match r {
        Ok(f) => (true, f.join(" ")),
        Err(e) => (false, e.to_string()),
    };
    let (pi, pid) = describe(py(input));
    let (pe, ped) = describe(py(&exported));
    let (ci, cid) = describe(cm(input).map(|f| f.readable));
    let (ce, ced) = describe(cm(&exported).map(|f| f.readable));
    vec![
        ConsumerReport {
            consumer: "torch.utils.cpp_extension (setup.py, load)",
            accepts_input: pi,
            input_detail: pid,
            accepts_exported: pe,
            exported_detail: ped,
        },
        ConsumerReport {
            consumer: "torch CMake (select_compute_arch.cmake)",
            accepts_input: ci,
            input_detail: cid,
            accepts_exported: ce,
            exported_detail: ced,
        },
    ]
}

/// Adds a target, merging a repeated arch (PTX if any mention asked for it) and counting its
/// mentions. Both lists hold one entry per distinct arch (a few dozen at most): a linear find is
/// the cheap look-up.
fn add_target(t: Target, targets: &mut Vec<Target>, mentions: &mut Vec<(Arch, usize)>) {
    match targets.iter_mut().find(|x| x.arch == t.arch) {
        Some(existing) => existing.ptx |= t.ptx,
        None => targets.push(t),
    }
    match mentions.iter_mut().find(|(a, _)| *a == t.arch) {
        Some(m) => m.1 += 1,
        None => mentions.push((t.arch, 1)),
    }
}

fn split_ptx(token: &str) -> (&str, bool) {
    let cut = token.len().saturating_sub(4);
    match (token.get(..cut), token.get(cut..)) {
        (Some(body), Some(suffix)) if suffix.eq_ignore_ascii_case("+ptx") => (body, true),
        _ => (token, false),
    }
}

/// `Some(Ok)` for a numeric arch, `Some(Err)` for something numeric-looking but wrong, `None` for a
/// word (which may be a family name).
fn parse_number(body: &str) -> Option<Result<Arch, String>> {
    if body.len() > 3 && body.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("sm_")) {
        return Some(Arch::from_target_name(&body.to_ascii_lowercase()).map_err(|e| e.to_string()));
    }
    if body.starts_with("compute_") {
        return Some(Err(format!(
            "a PTX-only target cannot be expressed in TORCH_CUDA_ARCH_LIST; write {}+PTX for SASS and PTX",
            Arch::from_target_name(body).map(|a| a.to_string()).unwrap_or_else(|_| "X.Y".into())
        )));
    }
    if body.contains('(') {
        return Some(Err(
            "`X.Y(A.B)` (SASS for X.Y built from compute_AB) is accepted only by torch's CMake parser, not by cpp_extension; write the archs separately".into(),
        ));
    }
    if body.starts_with(|c: char| c.is_ascii_digit()) {
        return Some(body.parse::<Arch>().map_err(|_| FORMS.to_string()));
    }
    None
}

fn explain_unknown(body: &str, names: &[(String, String)]) -> String {
    let known: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
    match body.to_ascii_lowercase().as_str() {
        "native" | "auto" => format!("`native`/`Auto` mean \"detect the GPUs of this machine\"; archsmith plans explicit archs. Name them (see `{} archs --list-gpus` for a GPU's compute capability)", crate::output::program()),
        "all" | "common" => "`All`/`Common` are CMake-only keywords whose lists still contain archs CUDA 13 rejects; name the archs instead".into(),
        _ => format!("{FORMS}; known family names: {}", known.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(torch: &str, cuda: &str) -> PlanContext {
        PlanContext::new(Some(torch.parse().unwrap()), Some(cuda.parse().unwrap()))
    }

    fn plan(spec: &str) -> Plan {
        Plan::parse(&ctx("2.15.0", "13.5"), spec).unwrap()
    }

    #[test]
    fn an_arch_spec_is_checked_for_form_where_it_is_typed() {
        for good in [
            "7.5,8.9,9.0",
            "8.0;9.0a+PTX",
            "Hopper",
            "sm_120",
            " 8.9 ",
            "Kepler+Tesla",
        ] {
            let spec: ArchSpec = good.parse().unwrap();
            assert_eq!(spec.as_str(), good);
        }
        for (bad, says) in [
            ("", "empty arch spec"),
            (" ;, ", "empty arch spec"),
            ("8,9", "`8` is not an arch"),
            ("sm_9x", "`sm_9x` is not an arch"),
            ("compute_90", "a PTX-only target"),
            ("7.5,$(rm -rf)", "is not an arch"),
            ("9.0,x.y", "`x.y` is not an arch"),
        ] {
            let e = bad.parse::<ArchSpec>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn user_form_and_outputs() {
        let p = plan("7.5,8.9,9.0+PTX");
        assert_eq!(p.torch_cuda_arch_list(), "7.5;8.9;9.0+PTX");
        assert_eq!(
            p.sass().iter().map(|a| a.sm()).collect::<Vec<_>>(),
            ["sm_75", "sm_89", "sm_90"]
        );
        assert_eq!(
            p.ptx().iter().map(|a| a.compute()).collect::<Vec<_>>(),
            ["compute_90"]
        );
        assert_eq!(p.cmake_cuda_architectures(), "75-real;89-real;90");
        assert_eq!(
            p.gencode(),
            [
                "-gencode=arch=compute_75,code=sm_75",
                "-gencode=arch=compute_89,code=sm_89",
                "-gencode=arch=compute_90,code=compute_90",
                "-gencode=arch=compute_90,code=sm_90",
            ]
        );
    }

    #[test]
    fn separators_names_duplicates_and_sm_forms() {
        assert_eq!(
            plan(" 9.0 ;7.5\t8.9, 7.5 ").torch_cuda_arch_list(),
            "7.5;8.9;9.0"
        );
        assert_eq!(plan("hopper").torch_cuda_arch_list(), "9.0+PTX");
        assert_eq!(
            plan("Ampere,sm_90a").torch_cuda_arch_list(),
            "8.0;8.6+PTX;9.0a"
        );
        assert_eq!(plan("9.0;9.0+PTX").torch_cuda_arch_list(), "9.0+PTX");
        assert_eq!(plan("10.0f").cmake_cuda_architectures(), "100f-real");
    }

    #[test]
    fn gencode_equals_the_torch_emulation_for_torch_valid_lists() {
        for spec in [
            "7.5;8.9;9.0+PTX",
            "9.0a+PTX;10.0",
            "Blackwell",
            "Turing;Rubin",
            "8.0;8.6;8.7;12.1a+PTX",
        ] {
            let p = plan(spec);
            let torch =
                torch_flags::cpp_extension_flags(&"2.15.0".parse().unwrap(), Some(spec)).unwrap();
            assert_eq!(p.gencode(), torch, "{spec}");
            let exported = torch_flags::cpp_extension_flags(
                &"2.15.0".parse().unwrap(),
                Some(&p.torch_cuda_arch_list()),
            )
            .unwrap();
            assert_eq!(p.gencode(), exported, "{spec}");
        }
    }

    fn err(torch: &str, cuda: &str, spec: &str) -> String {
        Plan::parse(&ctx(torch, cuda), spec)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn errors_name_the_arch_the_versions_and_the_fix() {
        let e = err("2.15.0", "13.2", "5.0,7.5");
        assert!(
            e.contains("5.0 is not supported by CUDA 13.2")
                && e.contains("through 12.9")
                && e.contains("--cuda 12.9 or older"),
            "{e}"
        );
        let e = err("2.1.0", "12.4", "9.0a");
        assert!(
            e.contains("9.0a is not accepted by torch 2.1.0")
                && e.contains("torch 2.2–2.15 accept it"),
            "{e}"
        );
        let e = err("2.15.0", "12.6", "10.0");
        assert!(e.contains("--cuda 12.8 or newer"), "{e}");
        let e = err("2.8.0", "12.9", "10.0f");
        assert!(e.contains("CMake accepts them from 2.9"), "{e}");
        assert!(err("2.15.0", "13.2", "").contains("empty arch spec"));
        assert!(err("2.15.0", "13.2", "8.6(8.0)").contains("only by torch's CMake"));
        assert!(err("2.15.0", "13.2", "Volta2").contains("known family names"));
        assert!(err("2.15.0", "13.2", "native").contains("detect the GPUs"));
        assert!(err("2.15.0", "13.2", "8.10").contains("expected X.Y"));
        assert!(
            err("1.4.0", "10.2", "7.5").contains("no TORCH_CUDA_ARCH_LIST rules for torch 1.4.0")
        );
    }

    #[test]
    fn never_panics_on_odd_bytes() {
        for s in [
            "+PTX",
            "+ptx",
            "é+PTX",
            "ﬀ",
            "9.0a+PTX+PTX",
            "sm_",
            "compute_",
            "(",
            "9.",
            "\u{0}",
            "9.0+P",
            "💥+PTX",
        ] {
            let _ = Plan::parse(&ctx("2.15.0", "13.2"), s);
        }
    }
}

#[cfg(test)]
mod hostile_input {
    use super::*;

    /// A small deterministic fuzz loop over fragments the grammar cares about: no input may panic,
    /// and whatever parses must round-trip through the exported list.
    #[test]
    fn random_specs_never_panic_and_round_trip() {
        let alphabet = [
            "7.5",
            "8.0",
            "8.9",
            "9.0",
            "9.0a",
            "10.0f",
            "12.0",
            "5.0",
            "11.0",
            "sm_86",
            "Hopper",
            "ampere",
            "+PTX",
            "+ptx",
            ",",
            ";",
            " ",
            "\t",
            ".",
            "a",
            "f",
            "(",
            ")",
            "8",
            "é",
            "💥",
            "compute_90",
            "native",
        ];
        let ctx = PlanContext::new(None, None);
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut parsed = 0;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = (next() % 8) as usize;
            let s: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            // The check at the edge never refuses what the plan would take.
            let edge = s.parse::<ArchSpec>();
            if Plan::parse_unvalidated(&ctx, &s).is_ok() {
                assert!(edge.is_ok(), "{s:?}: {edge:?}");
            }
            if let Ok(plan) = Plan::parse(&ctx, &s) {
                let again =
                    Plan::parse(&ctx, &plan.torch_cuda_arch_list()).expect("exported list parses");
                assert_eq!(again.targets, plan.targets, "{s:?}");
                parsed += 1;
            }
        }
        assert!(
            parsed > 1000,
            "only {parsed} of 20000 parsed; the generator is too weak"
        );
    }
}
