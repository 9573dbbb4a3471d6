//! Fuzzes the ELF dynamic-table reader of the load check (`binary::dynamic`, over gimli-rs's
//! `object`): the dynamic section and its string table, the dynamic symbol table, `.gnu.version`,
//! `.gnu.version_r` and `.gnu.version_d`, and what is derived from them (the C++ ABI through the
//! demangler, `PyInit_`). Any panic, hang or unbounded allocation is a bug.
#![no_main]

use archsmith::binary::dynamic::{self, Which};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(info) = dynamic::read(data) else { return };
    std::hint::black_box((info.cxx_abi(Which::Undefined), info.cxx_abi(Which::Defined)));
    std::hint::black_box(info.python_init());
    for s in info.symbols.iter().take(64) {
        std::hint::black_box(dynamic::demangle(s.name));
    }
});
