//! CUDA before 13 on glibc 2.41 and later: NVIDIA's own fix, backported into the headers of a
//! toolkit archsmith assembled.
//!
//! glibc 2.41 declares C23's `sinpi`, `cospi`, `sinpif` and `cospif` (and 2.42 `rsqrt`,
//! `rsqrtf`) with `__THROW`, which is `noexcept(true)` in C++; CUDA 12.x's `crt/math_functions.h`
//! declares the same names without it, and nvcc's front end refuses every `.cu` file on such a
//! host (Debian trixie, Ubuntu 25.04, Fedora 42): `mathcalls.h(79): error: exception
//! specification is incompatible with that of previous function "cospi"` — measured here with
//! Debian trixie's CUDA 12.4.131 and glibc 2.41 (opencv/opencv#27111, NVIDIA/nccl#1700,
//! NVIDIA's forum thread 323591). CUDA 13's headers fix it: a macro that gives those
//! declarations glibc's exception specification where glibc declares them, and host definitions
//! of the four functions only where it does not. [`backport`] makes the same change to a 12.x or
//! 11.x header pair; it is a no-op where NVIDIA's fix is already there and on an older glibc
//! (the macros then expand to nothing, as in CUDA 13).

/// The headers, under a `CUDA_HOME`.
pub const DECLARATIONS: &str = "include/crt/math_functions.h";
pub const DEFINITIONS: &str = "include/crt/math_functions.hpp";

/// NVIDIA's macro: a header that has it needs nothing.
const FIXED_MARK: &str = "__NV_IEC_60559_FUNCS_EXCEPTION_SPECIFIER";

/// CUDA 13's glibc detection, with glibc's own version test (`__GLIBC_PREREQ`).
const MACROS: &str = "
/* archsmith: NVIDIA's glibc 2.41/2.42 fix from CUDA 13's crt/math_functions.h, backported
   (toolchain/glibc_math.rs): glibc declares C23's sinpi/cospi(f) and rsqrt(f) noexcept. */
#if defined(__GNUC__) && !defined(__ANDROID__) && !defined(__QNX__) && !defined(__APPLE__)
#  include <features.h>
#  if defined(__GLIBC_PREREQ)
#    if __GLIBC_PREREQ(2,41) && (__GLIBC_USE_ISOC23 || defined(__STDC_WANT_IEC_60559_FUNCS_EXT__))
#      define __NV_GLIBC_PROVIDES_IEC_60559_FUNCS 1
#    endif
#    if __GLIBC_PREREQ(2,42)
#      define _NV_GLIBC_VERSION_GE_2_42 1
#    endif
#  endif
#endif
#if !defined(__NV_GLIBC_PROVIDES_IEC_60559_FUNCS)
#  define __NV_GLIBC_PROVIDES_IEC_60559_FUNCS 0
#endif
#if __NV_GLIBC_PROVIDES_IEC_60559_FUNCS
#  define __NV_IEC_60559_FUNCS_EXCEPTION_SPECIFIER __THROW
#else
#  define __NV_IEC_60559_FUNCS_EXCEPTION_SPECIFIER
#endif
#if defined(_NV_GLIBC_VERSION_GE_2_42)
#  define _NV_RSQRT_SPECIFIER noexcept(true)
#else
#  define _NV_RSQRT_SPECIFIER
#endif
";

/// The changed pair of headers, or why the text is not one this knows (a toolkit whose headers
/// moved: left alone, and its verification compile says what fails). `Ok(None)`: already fixed.
pub fn backport(declarations: &str, definitions: &str) -> Result<Option<(String, String)>, String> {
    if declarations.contains(FIXED_MARK) {
        return Ok(None);
    }
    Ok(Some((
        fix_declarations(declarations)?,
        fix_definitions(definitions)?,
    )))
}

/// `math_functions.h`: the macros, the declarations' exception specifications, the four host
/// declarations fenced.
fn fix_declarations(declarations: &str) -> Result<String, String> {
    let mut h = declarations.to_string();
    insert_after(&mut h, "#define __MATH_FUNCTIONS_H__\n", MACROS)?;
    for (decl, spec) in [
        ("double                 sinpi(double x)", FIXED_MARK),
        ("float                  sinpif(float x)", FIXED_MARK),
        ("double                 cospi(double x)", FIXED_MARK),
        ("float                  cospif(float x)", FIXED_MARK),
        (
            "double                 rsqrt(double x)",
            "_NV_RSQRT_SPECIFIER",
        ),
        (
            "float                  rsqrtf(float x)",
            "_NV_RSQRT_SPECIFIER",
        ),
    ] {
        replace_once(
            &mut h,
            &format!("__device_builtin__ {decl};"),
            &format!("__device_builtin__ {decl} {spec};"),
        )?;
    }
    // The host-code declarations: the four only where glibc does not declare them.
    for f in [
        "double sinpi(double a)",
        "double cospi(double a)",
        "float sinpif(float a)",
        "float cospif(float a)",
    ] {
        replace_once(
            &mut h,
            &format!("__func__({f});\n"),
            &format!("#if ! __NV_GLIBC_PROVIDES_IEC_60559_FUNCS\n__func__({f});\n#endif\n"),
        )?;
    }
    replace_once(
        &mut h,
        "__func__(double rsqrt(double a));",
        "__func__(double rsqrt(double a) _NV_RSQRT_SPECIFIER);",
    )?;
    replace_once(
        &mut h,
        "__func__(float rsqrtf(float a));",
        "__func__(float rsqrtf(float a) _NV_RSQRT_SPECIFIER);",
    )?;
    Ok(h)
}

/// `math_functions.hpp`: the four host definitions fenced, rsqrt's specification.
fn fix_definitions(definitions: &str) -> Result<String, String> {
    let mut d = definitions.to_string();
    // The host definitions of the four, each up to the next function CUDA 13 keeps.
    for (first, next) in [
        (
            "__func__(double sinpi(double a))",
            "__func__(void sincospi(const double a,",
        ),
        (
            "__func__(float sinpif(const float a))",
            "__func__(void sincospif(const float a,",
        ),
    ] {
        let start = find_once(&d, first)?;
        let end = start + find_once(&d[start..], next)?;
        d.insert_str(
            end,
            "#endif /* ! __NV_GLIBC_PROVIDES_IEC_60559_FUNCS */\n\n",
        );
        d.insert_str(start, "#if ! __NV_GLIBC_PROVIDES_IEC_60559_FUNCS\n");
    }
    replace_once(
        &mut d,
        "__func__(double rsqrt(const double a))",
        "__func__(double rsqrt(const double a) _NV_RSQRT_SPECIFIER)",
    )?;
    replace_once(
        &mut d,
        "__func__(float rsqrtf(const float a))",
        "__func__(float rsqrtf(const float a) _NV_RSQRT_SPECIFIER)",
    )?;
    Ok(d)
}

fn find_once(text: &str, what: &str) -> Result<usize, String> {
    let at = text
        .find(what)
        .ok_or_else(|| format!("`{what}` not found"))?;
    if text[at + what.len()..].contains(what) {
        return Err(format!("`{what}` found more than once"));
    }
    Ok(at)
}

fn replace_once(text: &mut String, what: &str, with: &str) -> Result<(), String> {
    let at = find_once(text, what)?;
    text.replace_range(at..at + what.len(), with);
    Ok(())
}

fn insert_after(text: &mut String, anchor: &str, insert: &str) -> Result<(), String> {
    let at = find_once(text, anchor)? + anchor.len();
    text.insert_str(at, insert);
    Ok(())
}

/// Applies [`backport`] to the toolkit at `cuda_home` (both files written whole, each by a
/// rename). Returns a line for the lock when it changed them; None when nothing was needed.
pub fn apply(cuda_home: &std::path::Path) -> anyhow::Result<Option<String>> {
    let (hp, dp) = (cuda_home.join(DECLARATIONS), cuda_home.join(DEFINITIONS));
    let (h, d) = (fs_err::read_to_string(&hp)?, fs_err::read_to_string(&dp)?);
    match backport(&h, &d) {
        Ok(None) => Ok(None),
        Ok(Some((h, d))) => {
            crate::cache::store(&hp, h.as_bytes())?;
            crate::cache::store(&dp, d.as_bytes())?;
            Ok(Some(format!(
                "{DECLARATIONS}, {DEFINITIONS}: NVIDIA's glibc 2.41/2.42 fix from CUDA 13 (C23 sinpi/cospi/rsqrt declared noexcept)"
            )))
        }
        Err(why) => anyhow::bail!(
            "{} has a layout the glibc 2.41 fix does not know ({why}); on a glibc 2.41+ host its kernels will not compile",
            hp.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of CUDA 12.4's headers, reduced to what the backport touches.
    const H: &str = "#if !defined(__MATH_FUNCTIONS_H__)\n#define __MATH_FUNCTIONS_H__\n\
extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ double                 rsqrt(double x);\n\
extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ float                  rsqrtf(float x);\n\
/** sinpi: a comment that mentions sinpi(double x); stays */\n\
extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ double                 sinpi(double x);\n\
extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ float                  sinpif(float x);\n\
extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ double                 cospi(double x);\n\
extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ float                  cospif(float x);\n\
__func__(double rsqrt(double a));\n__func__(double sinpi(double a));\n__func__(double cospi(double a));\n\
__func__(float rsqrtf(float a));\n__func__(float sinpif(float a));\n__func__(float cospif(float a));\n#endif\n";
    const D: &str = "__func__(double rsqrt(const double a))\n{ return 1.0 / sqrt(a); }\n\
__func__(double sinpi(double a))\n{ return 0.0; }\n__func__(double cospi(double a))\n{ return 1.0; }\n\
__func__(void sincospi(const double a, double *s, double *c))\n{ *s = sinpi(a); }\n\
__func__(float rsqrtf(const float a))\n{ return 1.0f; }\n\
__func__(float sinpif(const float a))\n{ return 0.0f; }\n__func__(float cospif(const float a))\n{ return 1.0f; }\n\
__func__(void sincospif(const float a, float *s, float *c))\n{ *s = sinpif(a); }\n";

    #[test]
    fn the_backport_gives_glibcs_declarations_their_exception_specification() {
        let (h, d) = backport(H, D).unwrap().expect("changed");
        assert!(h.contains("sinpi(double x) __NV_IEC_60559_FUNCS_EXCEPTION_SPECIFIER;"));
        assert!(h.contains("rsqrtf(float x) _NV_RSQRT_SPECIFIER;"));
        assert!(h.contains(
            "#if ! __NV_GLIBC_PROVIDES_IEC_60559_FUNCS\n__func__(float cospif(float a));\n#endif"
        ));
        assert!(
            h.contains("mentions sinpi(double x); stays"),
            "comments untouched"
        );
        // The host definitions of the four are fenced, sincospi and rsqrt stay.
        let fenced = d
            .split("#if ! __NV_GLIBC_PROVIDES_IEC_60559_FUNCS\n")
            .nth(1)
            .unwrap();
        assert!(fenced.starts_with("__func__(double sinpi(double a))"));
        assert!(fenced.contains(
            "#endif /* ! __NV_GLIBC_PROVIDES_IEC_60559_FUNCS */\n\n__func__(void sincospi("
        ));
        assert_eq!(d.matches("#if ! __NV_GLIBC").count(), 2);
        assert!(d.contains("__func__(double rsqrt(const double a) _NV_RSQRT_SPECIFIER)"));
        // Idempotent: the fixed header is left alone, as CUDA 13's is.
        assert_eq!(backport(&h, &d), Ok(None));
    }

    #[test]
    fn an_unknown_layout_is_named_not_half_patched() {
        let e = backport(&H.replace("cospif(float x);", "cospif(float);"), D).unwrap_err();
        assert!(e.contains("cospif(float x)"), "{e}");
    }
}
