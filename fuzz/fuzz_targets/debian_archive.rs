//! Fuzzes what archsmith reads from Debian's archive: a Release file's SHA256 list, a Packages
//! index, Depends fields, and a .deb streamed through the ar/tar/xz walk (its hash made to match,
//! so the unpacking itself is exercised; nothing is kept). Any panic, hang or unbounded
//! allocation is a bug; errors are the expected outcome for most inputs.
#![no_main]

use archsmith::downloads::deb_file::{extract, Expected};
use archsmith::downloads::debian_archive::{parse_depends, parse_packages, Release};
use libfuzzer_sys::fuzz_target;
use sha2::Digest;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = std::hint::black_box(Release::parse(&text));
    let _ = std::hint::black_box(parse_packages(&text, "main"));
    let _ = std::hint::black_box(parse_depends(&text));
    let sha = archsmith::stamp::hex(&sha2::Sha256::digest(data));
    let expected = Expected {
        what: "fuzz",
        size: data.len() as u64,
        sha256: &sha,
    };
    let dest = std::env::temp_dir().join("archsmith-fuzz-deb");
    let _ = extract(data, &expected, &|_| None, &dest, &mut |_| {});
});
