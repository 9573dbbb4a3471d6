use super::error::ErrorKind;
use super::expect::{check, Expectation};
use super::extract::for_each_image;
use super::fatbin::{self, FLAG_ARCH_SPECIFIC as A};
use super::synth::{self, Store};
use super::*;
use crate::cuda_arch::{Arch, Variant};

fn names(m: &BTreeMap<ImageArch, usize>, kind: Kind) -> Vec<(String, usize)> {
    m.iter().map(|(a, n)| (a.name(kind), *n)).collect()
}

fn section_offset(data: &[u8], name: &str) -> u64 {
    elf::Elf::parse(data)
        .unwrap()
        .section_by_name(name.as_bytes())
        .unwrap()
        .unwrap()
        .offset
}

#[test]
fn reads_archs_variants_compression_and_concatenated_entries_from_headers() {
    let lib = synth::sample_library();
    let a = audit_elf(&lib).unwrap();
    assert_eq!(a.sections.len(), 1);
    let s = a.counted().unwrap();
    assert_eq!((s.name, s.containers), (EXEC_SECTION, 2));
    assert_eq!(
        names(&a.counts(Kind::Elf), Kind::Elf),
        [
            ("sm_75".into(), 2),
            ("sm_90a".into(), 2),
            ("sm_100f".into(), 2)
        ]
    );
    assert_eq!(
        names(&a.counts(Kind::Ptx), Kind::Ptx),
        [("compute_120".into(), 2)]
    );
    let comp: Vec<_> = a.compression().into_iter().collect();
    assert_eq!(
        comp,
        [
            (Compression::None, 2),
            (Compression::Lz4, 1),
            (Compression::Zstd, 5)
        ]
    );
    assert_eq!(s.images.iter().filter(|i| i.concatenated).count(), 3);
    let arch = s
        .images
        .iter()
        .find(|i| i.arch.number == 100)
        .unwrap()
        .arch
        .arch()
        .unwrap();
    assert_eq!(arch, Arch::new(10, 0, Variant::FamilySpecific));
}

#[test]
fn decompresses_lz4_zstd_and_splits_concatenated_blobs() {
    let lib = synth::sample_library();
    let mut seen = Vec::new();
    for_each_image(&lib, |kind, arch, bytes| {
        seen.push((arch.name(kind), bytes.to_vec()))
    })
    .unwrap();
    let expect: Vec<(String, Vec<u8>)> = vec![
        ("sm_75".into(), synth::fake_cubin(1)),
        ("sm_90a".into(), synth::fake_cubin(2)),
        ("sm_100f".into(), synth::fake_cubin(3)),
        (
            "compute_120".into(),
            b".version 9.0\n.target sm_120\n".to_vec(),
        ),
        ("sm_75".into(), synth::fake_cubin(4)),
        ("sm_90a".into(), synth::fake_cubin(5)),
        ("sm_100f".into(), synth::fake_cubin(6)),
        ("compute_120".into(), b".version 9.0\n".to_vec()),
    ];
    assert_eq!(seen, expect);
}

#[test]
fn a_file_without_fatbin_sections_has_no_device_code() {
    let plain = synth::elf64(&[(".text", vec![0x90; 32])]);
    let a = audit_elf(&plain).unwrap();
    assert!(a.sections.is_empty() && !a.has_device_code() && a.counted().is_none());
    assert!(a.counts(Kind::Elf).is_empty());
}

#[test]
fn executable_fatbin_is_counted_before_relocatable_like_cuobjdump() {
    let rel = synth::container(&[synth::entry(2, 80, 0, &synth::fake_cubin(1), Store::Raw)]);
    let exe = synth::container(&[synth::entry(2, 90, 0, &synth::fake_cubin(2), Store::Raw)]);
    let only_rel = synth::elf64(&[(REL_SECTION, rel.clone())]);
    assert_eq!(
        audit_elf(&only_rel).unwrap().counted().unwrap().name,
        REL_SECTION
    );
    let both = synth::elf64(&[(REL_SECTION, rel), (EXEC_SECTION, exe)]);
    let a = audit_elf(&both).unwrap();
    assert_eq!(a.counted().unwrap().name, EXEC_SECTION);
    assert_eq!(
        names(&a.counts(Kind::Elf), Kind::Elf),
        [("sm_90".into(), 1)]
    );
    assert_eq!(a.sections.len(), 2);
}

#[test]
fn zero_padding_between_containers_is_skipped() {
    let c = synth::container(&[synth::entry(2, 86, 0, &synth::fake_cubin(1), Store::Raw)]);
    let mut sec = c.clone();
    sec.extend_from_slice(&[0u8; 16]);
    sec.extend_from_slice(&c);
    sec.extend_from_slice(&[0u8; 4]);
    let a = audit_elf(&synth::elf64(&[(EXEC_SECTION, sec)])).unwrap();
    assert_eq!(a.counted().unwrap().containers, 2);
}

#[test]
fn malformed_fatbins_report_the_byte_offset() {
    let lib = synth::sample_library();
    let base = section_offset(&lib, EXEC_SECTION);
    let c1_len = {
        let sec = elf::Elf::parse(&lib)
            .unwrap()
            .section_by_name(b".nv_fatbin")
            .unwrap()
            .unwrap();
        fatbin::containers(sec.data, 0)
            .next()
            .unwrap()
            .unwrap()
            .fat_size()
            + 16
    };
    // Second container's magic.
    let mut bad = lib.clone();
    bad[(base + c1_len) as usize] ^= 0xff;
    let e = audit_elf(&bad).unwrap_err();
    assert_eq!(e.offset, base + c1_len);
    assert!(matches!(e.kind, ErrorKind::BadFatbinMagic { .. }), "{e}");
    assert!(e.to_string().contains("0xba55ed50"), "{e}");
    // First container's size runs past the section.
    let mut bad = lib.clone();
    bad[(base + 8) as usize..(base + 16) as usize].copy_from_slice(&u64::MAX.to_le_bytes());
    let e = audit_elf(&bad).unwrap_err();
    assert_eq!(e.offset, base + 8);
    assert!(matches!(e.kind, ErrorKind::OutOfRange { .. }), "{e}");
    // First entry's header size below 64.
    let mut bad = lib.clone();
    bad[(base + 16 + 4) as usize..(base + 16 + 8) as usize].copy_from_slice(&8u32.to_le_bytes());
    let e = audit_elf(&bad).unwrap_err();
    assert_eq!(
        (e.offset, e.kind),
        (base + 20, ErrorKind::BadEntryHeaderSize(8))
    );
    // Not an ELF file.
    assert_eq!(
        audit_elf(b"MZ\x90\0 not elf").unwrap_err().kind,
        ErrorKind::NotElf
    );
}

#[test]
fn every_truncation_is_an_error_with_an_offset_inside_the_file_never_a_panic() {
    let lib = synth::sample_library();
    for len in 0..lib.len() {
        let e = audit_elf(&lib[..len]).expect_err(&format!("prefix of {len} bytes parsed"));
        assert!(
            e.offset <= lib.len() as u64,
            "offset {} for prefix {len}",
            e.offset
        );
    }
    // Truncating the section itself (not the file): the header says more than the section holds.
    let c = synth::container(&[synth::entry(2, 75, 0, &synth::fake_cubin(1), Store::Zstd)]);
    for cut in 1..c.len() {
        let data = synth::elf64(&[(EXEC_SECTION, c[..cut].to_vec())]);
        let base = section_offset(&data, EXEC_SECTION);
        let e = audit_elf(&data).expect_err(&format!("section cut at {cut} parsed"));
        assert!(
            e.offset >= base && e.offset <= base + cut as u64,
            "cut {cut}: {e}"
        );
    }
}

#[test]
fn every_corrupted_byte_is_handled_without_panicking() {
    let lib = synth::sample_library();
    for i in 0..lib.len() {
        for x in [0xff, 0x80, 0x01] {
            let mut bad = lib.clone();
            bad[i] ^= x;
            let _ = audit_elf(&bad);
            let _ = for_each_image(&bad, |_, _, b| {
                std::hint::black_box(b.len());
                // A cubin's own end, where `--extract` cuts it.
                let _ = std::hint::black_box(super::elf::Elf::parse(b).and_then(|e| e.extent()));
            });
        }
    }
}

#[test]
fn implausible_decompressed_sizes_are_refused_before_allocating() {
    let mut e = synth::entry(2, 90, 0, &synth::fake_cubin(1), Store::Zstd);
    e[0x38..0x40].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    let c = synth::container(&[e]);
    let entry = fatbin::containers(&c, 0)
        .next()
        .unwrap()
        .unwrap()
        .entries()
        .next()
        .unwrap()
        .unwrap();
    let err = entry.decompress().unwrap_err();
    assert_eq!(err.offset, 16 + 0x38);
    assert!(
        matches!(err.kind, ErrorKind::ImplausibleDecompressedSize { .. }),
        "{err}"
    );
    // A size that is plausible but wrong is caught after decoding, bounded by the declared size.
    let mut e = synth::entry(2, 90, 0, &synth::fake_cubin(1), Store::Lz4);
    e[0x38..0x40].copy_from_slice(&10u64.to_le_bytes());
    let c = synth::container(&[e]);
    let entry = fatbin::containers(&c, 0)
        .next()
        .unwrap()
        .unwrap()
        .entries()
        .next()
        .unwrap()
        .unwrap();
    assert!(entry.decompress().is_err());
}

#[test]
fn hostile_concat_tables_cannot_claim_more_sub_entries_than_bytes() {
    let mut e = synth::concat_entry(&[(2, 90, A, &synth::fake_cubin(1))], Store::Raw);
    e[0x40..0x44].copy_from_slice(&u32::MAX.to_le_bytes());
    let c = synth::container(&[e]);
    let entry = fatbin::containers(&c, 0)
        .next()
        .unwrap()
        .unwrap()
        .entries()
        .next()
        .unwrap()
        .unwrap();
    let err = entry.sub_entries().unwrap_err();
    assert!(
        matches!(err.kind, ErrorKind::BadConcatTable { .. }),
        "{err}"
    );
    assert_eq!(err.offset, 16 + 0x40);
}

#[test]
fn expectations_are_checked_per_container() {
    // Two containers: sm_75 + sm_80 in the first, only sm_80 in the second.
    let c1 = synth::container(&[
        synth::entry(2, 75, 0, &synth::fake_cubin(1), Store::Raw),
        synth::entry(2, 80, 0, &synth::fake_cubin(2), Store::Raw),
    ]);
    let c2 = synth::container(&[
        synth::entry(2, 80, 0, &synth::fake_cubin(3), Store::Raw),
        synth::entry(2, 90, A, &synth::fake_cubin(4), Store::Raw),
    ]);
    let a = audit_elf(&synth::elf64(&[(EXEC_SECTION, [c1, c2].concat())])).unwrap();
    let expect = Expectation {
        sass: vec![Arch::plain(7, 5), Arch::plain(8, 0)],
        ptx: vec![Arch::plain(8, 0)],
    };
    let c = check(&a, &expect);
    assert_eq!(c.missing_sass.len(), 1);
    assert_eq!(
        (
            c.missing_sass[0].name.as_str(),
            c.missing_sass[0].containers_with
        ),
        ("sm_75", 1)
    );
    assert_eq!(c.missing_ptx[0].name, "compute_80");
    assert_eq!(
        (c.extra_sass[0].name.as_str(), c.extra_sass[0].count),
        ("sm_90a", 1)
    );
    assert!(c.missing_any() && c.extra_any());
    // No device code: nothing to miss.
    let none = audit_elf(&synth::elf64(&[(".text", vec![0; 8])])).unwrap();
    assert!(!check(&none, &expect).missing_any());
}

#[test]
fn wheels_are_read_in_memory_and_only_shared_objects_are_audited() {
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("archsmith-wheel-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let whl = dir.join("pkg-1.0-py3-none-linux_x86_64.whl");
    let mut z = zip::ZipWriter::new(std::fs::File::create(&whl).unwrap());
    let deflate = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in [
        ("pkg/__init__.py", b"print('hi')".to_vec()),
        ("pkg/lib/libk.so", synth::sample_library()),
        (
            "pkg/lib/libplain.so.1",
            synth::elf64(&[(".text", vec![0; 8])]),
        ),
        ("pkg/lib/notes.so.txt", b"not an elf".to_vec()),
    ] {
        z.start_file(name, deflate).unwrap();
        z.write_all(&data).unwrap();
    }
    z.finish().unwrap();
    let files = audit_paths(
        &[whl.clone(), dir.clone()],
        &input::Options {
            extract: None,
            threads: 2,
            kernels_for: Vec::new(),
            unpacked: Vec::new(),
        },
    );
    let paths: Vec<&str> = files
        .iter()
        .map(|f| f.path.rsplit('!').next().unwrap())
        .collect();
    // Given once as a file and once through its directory.
    assert_eq!(
        paths,
        [
            "pkg/lib/libk.so",
            "pkg/lib/libplain.so.1",
            "pkg/lib/notes.so.txt"
        ]
        .repeat(2)
    );
    let Outcome::Audited(a) = &files[0].outcome else {
        panic!("{:?}", files[0].outcome)
    };
    assert_eq!(
        names(&a.counts(Kind::Ptx), Kind::Ptx),
        [("compute_120".into(), 2)]
    );
    assert!(matches!(&files[1].outcome, Outcome::Audited(a) if !a.has_device_code()));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A wheel the same command unpacked (a load check's copy) is audited from those files, not
/// inflated again: a member is read from its file when that file has the member's size, and from
/// the zip otherwise. Told apart here by giving the unpacked file other bytes of the same size.
#[test]
fn a_wheel_already_unpacked_is_read_from_its_files_of_the_members_size() {
    use std::io::Write;
    let root = std::env::temp_dir().join(format!("archsmith-unpacked-test-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let (device, plain) = (
        synth::sample_library(),
        synth::elf64(&[(".text", vec![0; 8])]),
    );
    let len = device.len().max(plain.len());
    let pad = |mut v: Vec<u8>| {
        v.resize(len, 0);
        v
    };
    let whl = root.join("pkg-1.0-py3-none-linux_x86_64.whl");
    let mut z = zip::ZipWriter::new(std::fs::File::create(&whl).unwrap());
    z.start_file("pkg/libk.so", zip::write::SimpleFileOptions::default())
        .unwrap();
    z.write_all(&pad(plain.clone())).unwrap();
    z.finish().unwrap();
    let unpacked = root.join("unpacked");
    std::fs::create_dir_all(unpacked.join("pkg")).unwrap();
    let audit = |with: &[u8]| {
        std::fs::write(unpacked.join("pkg/libk.so"), with).unwrap();
        let files = audit_paths(
            std::slice::from_ref(&whl),
            &input::Options {
                threads: 1,
                unpacked: vec![(whl.clone(), unpacked.clone())],
                ..Default::default()
            },
        );
        assert_eq!(files.len(), 1);
        assert!(
            files[0].path.ends_with(".whl!pkg/libk.so"),
            "{}",
            files[0].path
        );
        match &files[0].outcome {
            Outcome::Audited(a) => a.has_device_code(),
            other => panic!("{other:?}"),
        }
    };
    // The unpacked file, the member's size: read from there (the zip's member has no device code).
    assert!(audit(&pad(device.clone())));
    // Another size: not that member; the zip's own bytes are read.
    let mut longer = pad(device);
    longer.push(0);
    assert!(!audit(&longer));
    std::fs::remove_dir_all(&root).unwrap();
}

/// Regenerates `fuzz/corpus/binary_reader/` (run with ARCHSMITH_WRITE_FUZZ_SEEDS=1).
#[test]
fn write_fuzz_seeds() {
    if std::env::var_os("ARCHSMITH_WRITE_FUZZ_SEEDS").is_none() {
        return;
    }
    let dir = crate::paths::repo_root().join("fuzz/corpus/binary_reader");
    std::fs::create_dir_all(&dir).unwrap();
    let cubin = synth::fake_cubin(7);
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        ("sample_library.so", synth::sample_library()),
        (
            "no_device_code.so",
            synth::elf64(&[(".text", vec![0xc3; 8])]),
        ),
        (
            "relocatable_only.o",
            synth::elf64(&[(
                REL_SECTION,
                synth::container(&[synth::entry(2, 80, 0, &cubin, Store::Lz4)]),
            )]),
        ),
        (
            "concat_lz4.so",
            synth::elf64(&[(
                EXEC_SECTION,
                synth::container(&[synth::concat_entry(
                    &[(2, 100, A, &cubin), (1, 120, 0, b"ptx")],
                    Store::Lz4,
                )]),
            )]),
        ),
        (
            "elf32_big_endian.so",
            synth::elf(
                &[(
                    EXEC_SECTION,
                    synth::container(&[synth::entry(2, 75, 0, &cubin, Store::Raw)]),
                )],
                false,
                false,
            ),
        ),
        (
            "raw_fatbin_section.bin",
            synth::container(&[synth::entry(1, 90, A, b".target sm_90a", Store::Zstd)]),
        ),
    ];
    for (name, bytes) in seeds {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

#[test]
fn a_corrupted_wheel_member_is_an_error_not_a_wrong_answer() {
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("archsmith-badwheel-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let whl = dir.join("bad-1.0-py3-none-any.whl");
    let lib = synth::sample_library();
    let mut z = zip::ZipWriter::new(std::fs::File::create(&whl).unwrap());
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    z.start_file("bad/libk.so", stored).unwrap();
    z.write_all(&lib).unwrap();
    z.finish().unwrap();
    let mut bytes = std::fs::read(&whl).unwrap();
    // Flip a byte inside the stored member (its data follows the 30-byte local header and name).
    let at = bytes.windows(4).position(|w| w == b"\x7fELF").unwrap() + 200;
    bytes[at] ^= 0x55;
    std::fs::write(&whl, &bytes).unwrap();
    let files = audit_paths(std::slice::from_ref(&whl), &input::Options::default());
    assert_eq!(files.len(), 1);
    match &files[0].outcome {
        Outcome::Failed(e) => assert!(e.to_string().contains("CRC-32"), "{e}"),
        other => panic!("corruption went unnoticed: {other:?}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_empty_executable_section_does_not_hide_the_relocatable_one() {
    let rel = synth::container(&[synth::entry(2, 80, 0, &synth::fake_cubin(1), Store::Raw)]);
    let a = audit_elf(&synth::elf64(&[
        (EXEC_SECTION, Vec::new()),
        (REL_SECTION, rel),
    ]))
    .unwrap();
    assert_eq!(a.counted().unwrap().name, REL_SECTION);
    assert_eq!(
        names(&a.counts(Kind::Elf), Kind::Elf),
        [("sm_80".into(), 1)]
    );
}

#[test]
fn reads_32_bit_and_big_endian_elf_files() {
    let c = synth::container(&[synth::entry(2, 87, 0, &synth::fake_cubin(1), Store::Lz4)]);
    for (is_64, little) in [(false, true), (false, false), (true, false), (true, true)] {
        let data = synth::elf(
            &[(".text", vec![0; 4]), (EXEC_SECTION, c.clone())],
            is_64,
            little,
        );
        let a = audit_elf(&data).unwrap_or_else(|e| panic!("64-bit {is_64}, little {little}: {e}"));
        assert_eq!(
            names(&a.counts(Kind::Elf), Kind::Elf),
            [("sm_87".into(), 1)],
            "64-bit {is_64}, little {little}"
        );
        for len in 0..data.len() {
            assert!(audit_elf(&data[..len]).is_err());
        }
    }
}
