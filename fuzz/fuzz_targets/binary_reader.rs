//! Fuzzes the ELF + fatbin reader: whole files (ELF parse, section lookup, container/entry walk,
//! concatenated tables, decompression) and raw fatbin section bytes. Any panic, hang or
//! unbounded allocation is a bug; errors are the expected outcome for most inputs.
#![no_main]

use archsmith::binary::{audit_elf, extract::for_each_image, fatbin};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(a) = audit_elf(data) {
        for s in &a.sections {
            std::hint::black_box((s.counts(archsmith::binary::Kind::Elf), s.code_containers()));
        }
    }
    let _ = for_each_image(data, |_, _, bytes| {
        std::hint::black_box(bytes.len());
        let _ = std::hint::black_box(
            archsmith::binary::elf::Elf::parse(bytes).and_then(|e| e.extent()),
        );
    });
    let _ = std::hint::black_box(archsmith::binary::elf::Elf::parse(data).and_then(|e| e.extent()));
    for c in fatbin::containers(data, 0) {
        let Ok(c) = c else { break };
        for e in c.entries() {
            let Ok(e) = e else { break };
            let _ = std::hint::black_box(e.sub_entries());
            let _ = std::hint::black_box(e.identifier());
            let _ = std::hint::black_box(e.decompress().map(|d| d.len()));
        }
    }
});
