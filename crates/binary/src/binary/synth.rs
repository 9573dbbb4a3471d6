//! Builds synthetic ELF + fatbin files byte by byte, for unit tests and the fuzz seed corpus
//! (`fuzz/corpus/binary_reader/`, written by `tests::write_fuzz_seeds`). Only this repository's
//! code produces these bytes; compressed payloads use hand-made LZ4 literal blocks and zstd raw
//! blocks so no encoder is needed.

use super::fatbin::{FATBIN_MAGIC, FLAG_LZ4, FLAG_ZSTD, KIND_CONCAT};

/// How a synthetic payload is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    Raw,
    Lz4,
    Zstd,
}

fn pad8(v: &mut Vec<u8>) {
    while !v.len().is_multiple_of(8) {
        v.push(0);
    }
}

/// An LZ4 block holding `data` as one literal run (valid for any length).
pub fn lz4_literal_block(data: &[u8]) -> Vec<u8> {
    let n = data.len();
    let mut out = vec![(n.min(15) as u8) << 4];
    if n >= 15 {
        let mut rest = n - 15;
        while rest >= 255 {
            out.push(255);
            rest -= 255;
        }
        out.push(rest as u8);
    }
    out.extend_from_slice(data);
    out
}

/// A zstd frame holding `data` (at most 65791 bytes) in one raw block, with its content size.
pub fn zstd_raw_frame(data: &[u8]) -> Vec<u8> {
    assert!(
        data.len() <= 65535 + 256,
        "synthetic zstd frames hold at most 65791 bytes"
    );
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd];
    if data.len() < 256 {
        out.push(0x20); // single segment, 1-byte content size
        out.push(data.len() as u8);
    } else {
        out.push(0x60); // single segment, 2-byte content size (stored minus 256)
        out.extend_from_slice(&((data.len() - 256) as u16).to_le_bytes());
    }
    let block = ((data.len() as u32) << 3) | 1; // last block, raw
    out.extend_from_slice(&block.to_le_bytes()[..3]);
    out.extend_from_slice(data);
    out
}

fn compress(store: Store, payload: &[u8]) -> (Vec<u8>, u64) {
    match store {
        Store::Raw => (payload.to_vec(), 0),
        Store::Lz4 => (lz4_literal_block(payload), FLAG_LZ4),
        Store::Zstd => (zstd_raw_frame(payload), FLAG_ZSTD),
    }
}

/// The 64-byte entry header layout (docs/research/fatbin.md §2.2).
#[allow(clippy::too_many_arguments)]
fn header(
    kind: u16,
    header_size: u32,
    size: u64,
    compressed: u32,
    options_offset: u32,
    version: (u16, u16),
    arch: u32,
    flags: u64,
    decompressed: u64,
) -> Vec<u8> {
    let mut h = Vec::with_capacity(64);
    h.extend_from_slice(&kind.to_le_bytes());
    h.extend_from_slice(&0x0101u16.to_le_bytes());
    h.extend_from_slice(&header_size.to_le_bytes());
    h.extend_from_slice(&size.to_le_bytes());
    h.extend_from_slice(&compressed.to_le_bytes());
    h.extend_from_slice(&options_offset.to_le_bytes());
    h.extend_from_slice(&version.1.to_le_bytes());
    h.extend_from_slice(&version.0.to_le_bytes());
    h.extend_from_slice(&arch.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes()); // identifier offset
    h.extend_from_slice(&0u32.to_le_bytes()); // identifier length
    h.extend_from_slice(&flags.to_le_bytes());
    h.extend_from_slice(&0u64.to_le_bytes());
    h.extend_from_slice(&decompressed.to_le_bytes());
    h
}

/// One entry: `kind` 1 (PTX), 2 (ELF), 8 (IR); `flags` adds a/f bits; the 64-bit/Linux bits are set.
pub fn entry(kind: u16, arch: u32, flags: u64, payload: &[u8], store: Store) -> Vec<u8> {
    let (stored, cflag) = compress(store, payload);
    let mut body = stored.clone();
    pad8(&mut body);
    let (csize, dsize) = if store == Store::Raw {
        (0, 0)
    } else {
        (stored.len() as u32, payload.len() as u64)
    };
    let version = if kind == 1 { (9, 0) } else { (1, 8) };
    let mut e = header(
        kind,
        64,
        body.len() as u64,
        csize,
        0,
        version,
        arch,
        flags | cflag | 0x11,
        dsize,
    );
    e.extend_from_slice(&body);
    e
}

/// A CUDA 13 concatenated entry: one (compressed) blob holding every sub-payload, with the
/// sub-entry table in the header. Sub-entries are `(kind, arch, flags, payload)`.
pub fn concat_entry(subs: &[(u16, u32, u64, &[u8])], store: Store) -> Vec<u8> {
    let mut blob = Vec::new();
    let mut table = Vec::new();
    for (kind, arch, flags, payload) in subs {
        let off = blob.len() as u32;
        blob.extend_from_slice(payload);
        pad8(&mut blob);
        let version = if *kind == 1 { (9, 0) } else { (1, 8) };
        table.extend(header(
            *kind,
            off,
            payload.len() as u64,
            0,
            0,
            version,
            *arch,
            flags | 0x11,
            0,
        ));
    }
    let (stored, cflag) = compress(store, &blob);
    let mut body = stored.clone();
    pad8(&mut body);
    let header_size = 0x48 + table.len() as u32;
    let csize = if store == Store::Raw {
        0
    } else {
        stored.len() as u32
    };
    let dsize = if store == Store::Raw {
        0
    } else {
        blob.len() as u64
    };
    let mut e = header(
        KIND_CONCAT,
        header_size,
        body.len() as u64,
        csize,
        0x40,
        (0, 1),
        0,
        cflag | 0x11,
        dsize,
    );
    e.extend_from_slice(&(subs.len() as u32).to_le_bytes());
    e.extend_from_slice(&(8 + table.len() as u32).to_le_bytes());
    e.extend_from_slice(&table);
    e.extend_from_slice(&body);
    e
}

/// A fatbin container around `entries`.
pub fn container(entries: &[Vec<u8>]) -> Vec<u8> {
    let body: Vec<u8> = entries.concat();
    let mut c = Vec::with_capacity(16 + body.len());
    c.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
    c.extend_from_slice(&1u16.to_le_bytes());
    c.extend_from_slice(&16u16.to_le_bytes());
    c.extend_from_slice(&(body.len() as u64).to_le_bytes());
    c.extend_from_slice(&body);
    c
}

/// A minimal 64-bit little-endian ELF (`ET_DYN`, x86-64) with the given sections (PROGBITS),
/// a `.shstrtab`, and the section header table at the end, as linkers lay it out.
pub fn elf64(sections: &[(&str, Vec<u8>)]) -> Vec<u8> {
    elf(sections, true, true)
}

/// Like [`elf64`], in any class (32/64-bit) and byte order (the fatbin inside stays little-endian).
pub fn elf(sections: &[(&str, Vec<u8>)], is_64: bool, little: bool) -> Vec<u8> {
    let (ehsize, shentsize) = if is_64 { (64usize, 64usize) } else { (52, 40) };
    let put = |buf: &mut [u8], at: usize, v: u64, width: usize| {
        let bytes = if little {
            v.to_le_bytes()
        } else {
            v.to_be_bytes()
        };
        let src = if little {
            &bytes[..width]
        } else {
            &bytes[8 - width..]
        };
        buf[at..at + width].copy_from_slice(src);
    };
    let word = if is_64 { 8 } else { 4 };
    let mut out = vec![0u8; ehsize];
    let mut shstrtab = vec![0u8];
    let mut headers: Vec<Vec<u8>> = vec![vec![0; shentsize]];
    let add = |out: &mut Vec<u8>, name_off: u32, sh_type: u32, data: &[u8]| {
        pad8(out);
        let off = out.len() as u64;
        out.extend_from_slice(data);
        let mut h = vec![0u8; shentsize];
        put(&mut h, 0, u64::from(name_off), 4);
        put(&mut h, 4, u64::from(sh_type), 4);
        let (off_at, size_at, align_at) = if is_64 {
            (0x18, 0x20, 0x30)
        } else {
            (0x10, 0x14, 0x20)
        };
        put(&mut h, off_at, off, word);
        put(&mut h, size_at, data.len() as u64, word);
        put(&mut h, align_at, 8, word);
        h
    };
    let mut names = Vec::new();
    for (name, _) in sections {
        names.push(shstrtab.len() as u32);
        shstrtab.extend_from_slice(name.as_bytes());
        shstrtab.push(0);
    }
    let shstr_name = shstrtab.len() as u32;
    shstrtab.extend_from_slice(b".shstrtab\0");
    for ((_, data), name_off) in sections.iter().zip(&names) {
        let h = add(&mut out, *name_off, 1, data);
        headers.push(h);
    }
    let h = add(&mut out, shstr_name, 3, &shstrtab);
    headers.push(h);
    pad8(&mut out);
    let shoff = out.len() as u64;
    for h in &headers {
        out.extend_from_slice(h);
    }
    out[0..4].copy_from_slice(b"\x7fELF");
    out[4] = if is_64 { 2 } else { 1 };
    out[5] = if little { 1 } else { 2 };
    out[6] = 1; // EV_CURRENT
    put(&mut out, 16, 3, 2); // ET_DYN
    put(&mut out, 18, if is_64 { 62 } else { 3 }, 2); // x86-64 / i386
    put(&mut out, 20, 1, 4);
    let (shoff_at, ehsize_at, rest_at) = if is_64 {
        (0x28, 0x34, 0x3a)
    } else {
        (0x20, 0x28, 0x2e)
    };
    put(&mut out, shoff_at, shoff, word);
    put(&mut out, ehsize_at, ehsize as u64, 2);
    put(&mut out, rest_at, shentsize as u64, 2);
    put(&mut out, rest_at + 2, headers.len() as u64, 2);
    put(&mut out, rest_at + 4, (headers.len() - 1) as u64, 2);
    out
}

/// A small fake cubin: the ELF magic and some bytes (enough for the reader, which never parses it).
pub fn fake_cubin(tag: u8) -> Vec<u8> {
    let mut v = b"\x7fELF\x02\x01\x01\x41\x08".to_vec();
    v.extend(std::iter::repeat_n(tag, 23));
    v
}

/// A library like `nvcc -shared` makes: two containers, several archs, PTX, every storage kind,
/// `a`/`f` flags and a concatenated entry.
pub fn sample_library() -> Vec<u8> {
    use super::fatbin::{FLAG_ARCH_SPECIFIC as A, FLAG_FAMILY_SPECIFIC as F};
    let c1 = container(&[
        entry(2, 75, 0, &fake_cubin(1), Store::Raw),
        entry(2, 90, A, &fake_cubin(2), Store::Lz4),
        entry(2, 100, F, &fake_cubin(3), Store::Zstd),
        entry(1, 120, 0, b".version 9.0\n.target sm_120\n", Store::Zstd),
    ]);
    let c2 = container(&[
        entry(2, 75, 0, &fake_cubin(4), Store::Raw),
        concat_entry(
            &[
                (2, 90, A, &fake_cubin(5)),
                (2, 100, F, &fake_cubin(6)),
                (1, 120, 0, b".version 9.0\n"),
            ],
            Store::Zstd,
        ),
    ]);
    let mut fatbin = c1;
    fatbin.extend_from_slice(&c2);
    elf64(&[
        (".text", vec![0xc3; 16]),
        (".nv_fatbin", fatbin),
        (".data", vec![1, 2, 3, 4]),
    ])
}
