//! Every rule of the simulator, each with a test that fails without it.

use clawmem_sim::{
    CutPoint, Esp32Flash, Geometry, InjectedError, Model, Nor, OpKind, PowerCut, Preset, SimError,
    SimFlash, Stm32h7Flash, Stm32l4Flash, Tear, WriteRule,
};
use embedded_storage::nor_flash::{
    MultiwriteNorFlash, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};

fn esp32(sectors: usize) -> SimFlash {
    SimFlash::new(Preset::Esp32.model(4096 * sectors).unwrap())
}

fn read_all(f: &SimFlash, addr: usize, len: usize) -> Vec<u8> {
    let mut b = vec![0; len];
    f.peek(addr, &mut b);
    b
}

// ---- geometry and presets -------------------------------------------------

#[test]
fn geometry_accepts_supported_sizes_only() {
    for w in [1, 2, 4, 8, 16, 32] {
        for shift in 7..=17 {
            assert!(
                Geometry::new(w, 1 << shift, 3).is_ok(),
                "w={w} e={}",
                1 << shift
            );
        }
    }
    assert!(Geometry::new(3, 4096, 1).is_err());
    assert!(Geometry::new(64, 4096, 1).is_err());
    assert!(Geometry::new(4, 64, 1).is_err());
    assert!(Geometry::new(4, 256 * 1024, 1).is_err());
    assert!(Geometry::new(4, 3000, 1).is_err());
    assert!(Geometry::new(4, 4096, 0).is_err());
    let g = Geometry::new(8, 256, 1000).unwrap();
    assert_eq!(g.capacity(), 256_000);
    assert_eq!(g.words_per_sector(), 32);
}

#[test]
fn presets_model_the_named_parts() {
    let m = Preset::Esp32.default_model();
    assert_eq!((m.geometry.write_size, m.geometry.erase_size), (4, 4096));
    assert_eq!(m.geometry.capacity(), 1024 * 1024);
    assert_eq!(m.write_rule, WriteRule::Unlimited);
    assert_eq!(m.timings.program_unit_us, 400);
    assert_eq!(m.timings.program_unit_bytes, 256);
    assert_eq!(m.timings.erase_sector_us, 45_000);
    assert_eq!(m.timings.endurance_cycles, 100_000);

    let m = Preset::Nrf52.default_model();
    assert_eq!((m.geometry.write_size, m.geometry.erase_size), (4, 4096));
    assert_eq!(m.write_rule, WriteRule::AtMost(2));
    assert_eq!(m.timings.endurance_cycles, 10_000);

    let m = Preset::Stm32l4.default_model();
    assert_eq!((m.geometry.write_size, m.geometry.erase_size), (8, 2048));
    assert_eq!(m.write_rule, WriteRule::SecondWriteZeros);

    let m = Preset::Stm32h7.default_model();
    assert_eq!(
        (m.geometry.write_size, m.geometry.erase_size),
        (32, 128 * 1024)
    );
    assert_eq!(m.write_rule, WriteRule::Once);

    // ESP32 flash encryption: 16 B blocks written once, the ESP32's sectors
    // and timings.
    let m = Preset::Esp32Encrypted.default_model();
    let e = Preset::Esp32.default_model();
    assert_eq!((m.geometry.write_size, m.geometry.erase_size), (16, 4096));
    assert_eq!(m.write_rule, WriteRule::Once);
    assert_eq!(m.timings, e.timings);
    assert_eq!(
        "esp32-encrypted".parse::<Preset>().unwrap(),
        Preset::Esp32Encrypted
    );
    let mut f = SimFlash::new(Preset::Esp32Encrypted.model(4096).unwrap());
    f.program(0, &[0x5A; 16]).unwrap();
    assert!(
        f.program(0, &[0x00; 16]).is_err(),
        "a block is written once"
    );
    assert!(f.program(20, &[0x00; 16]).is_err(), "16 B alignment");
    assert!(clawmem_sim::Esp32EncryptedFlash::new(SimFlash::new(m)).is_ok());

    assert_eq!("ESP32".parse::<Preset>().unwrap(), Preset::Esp32);
    let err = "esp8266".parse::<Preset>().unwrap_err().to_string();
    assert!(err.contains("esp8266") && err.contains("stm32h7"), "{err}");
    assert!(Preset::Esp32.model(5000).is_err());
}

// ---- NOR semantics --------------------------------------------------------

#[test]
fn new_flash_and_erase_read_all_ones() {
    let mut f = esp32(2);
    assert!(f.image().iter().all(|b| *b == 0xFF));
    f.program(4096, &[0u8; 16]).unwrap();
    f.erase(4096, 8192).unwrap();
    assert!(read_all(&f, 4096, 4096).iter().all(|b| *b == 0xFF));
}

/// `same_contents` (what torture uses to tell a cut that left the flash as
/// the clean run had it): the bytes and the write budgets left, not the
/// counters.
#[test]
fn same_contents_compares_bytes_and_write_budgets() {
    let mut a = esp32(2);
    let mut b = a.snapshot();
    assert!(a.same_contents(&b));
    // Erasing a blank sector changes nothing a mount could see.
    b.erase(4096, 8192).unwrap();
    assert!(a.same_contents(&b) && b.same_contents(&a));
    // A program of ones leaves the bytes but spends the word's budget.
    b.program(0, &[0xFF; 4]).unwrap();
    assert_eq!(a.image(), b.image());
    assert!(!a.same_contents(&b));
    a.program(0, &[0xFF; 4]).unwrap();
    assert!(a.same_contents(&b));
    a.program(4096, &[0x0F; 4]).unwrap();
    assert!(!a.same_contents(&b) && !b.same_contents(&a));
    assert!(!a.same_contents(&esp32(3)));
}

#[test]
fn program_only_clears_bits() {
    let mut f = esp32(1);
    f.program(0, &[0b1100_1100; 4]).unwrap();
    f.program(0, &[0b1010_1010; 4]).unwrap();
    assert_eq!(read_all(&f, 0, 4), vec![0b1000_1000; 4]);
    // Writing ones never sets a bit back.
    f.program(0, &[0xFF; 4]).unwrap();
    assert_eq!(read_all(&f, 0, 4), vec![0b1000_1000; 4]);
}

#[test]
fn write_budget_at_most_two_is_enforced_and_counted() {
    let mut f = SimFlash::new(Preset::Nrf52.model(4096).unwrap());
    f.program(0, &[0xF0; 4]).unwrap();
    f.program(0, &[0x0F; 4]).unwrap();
    let err = f.program(0, &[0x00; 4]).unwrap_err();
    assert!(
        matches!(
            err,
            SimError::WriteBudget {
                address: 0,
                writes: 2,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(f.stats().write_budget_violations, 1);
    assert_eq!(
        read_all(&f, 0, 4),
        vec![0x00; 4],
        "refused program changed nothing"
    );
    // A multi-word program that hits a spent word is refused whole.
    f.program(4, &[0xAA; 4]).unwrap();
    assert!(f.program(4, &[0x00; 8]).is_ok());
    assert!(f.program(0, &[0x00; 16]).is_err());
    assert_eq!(
        read_all(&f, 12, 4),
        vec![0xFF; 4],
        "the fresh word of a refused call"
    );
    assert_eq!(f.stats().write_budget_violations, 2);
    // Erase gives the budget back.
    f.erase(0, 4096).unwrap();
    f.program(0, &[0x11; 4]).unwrap();
    f.program(0, &[0x01; 4]).unwrap();
}

#[test]
fn write_budget_once_refuses_any_second_write() {
    let mut f = SimFlash::new(Preset::Stm32h7.model(128 * 1024).unwrap());
    f.program(32, &[0xFF; 32]).unwrap();
    assert!(matches!(
        f.program(32, &[0x00; 32]),
        Err(SimError::WriteBudget { .. })
    ));
    f.program(64, &[0x00; 32]).unwrap();
    assert_eq!(f.stats().write_budget_violations, 1);
}

#[test]
fn write_budget_second_write_only_zeros() {
    let mut f = SimFlash::new(Preset::Stm32l4.model(2048 * 2).unwrap());
    f.program(0, &[0x5A; 8]).unwrap();
    assert!(f.program(0, &[0x00, 0, 0, 0, 0, 0, 0, 1]).is_err());
    f.program(0, &[0x00; 8]).unwrap();
    assert!(
        f.program(0, &[0x00; 8]).is_err(),
        "a third write is refused"
    );
    assert_eq!(f.stats().write_budget_violations, 2);
}

#[test]
fn unlimited_rule_allows_many_writes() {
    let mut f = esp32(1);
    for i in 0..20u8 {
        f.program(0, &[!(1u8 << (i % 8)); 4]).unwrap();
    }
    assert_eq!(f.stats().write_budget_violations, 0);
    assert_eq!(f.word_writes(0), 20);
}

#[test]
fn misaligned_and_out_of_bounds_calls_are_refused() {
    let mut nor = Stm32l4Flash::new(SimFlash::new(Preset::Stm32l4.model(4096).unwrap())).unwrap();
    let kind = |r: Result<(), SimError>| r.unwrap_err().kind();
    assert_eq!(kind(nor.write(4, &[0; 8])), NorFlashErrorKind::NotAligned);
    assert_eq!(kind(nor.write(0, &[0; 4])), NorFlashErrorKind::NotAligned);
    assert_eq!(
        kind(nor.write(4096, &[0; 8])),
        NorFlashErrorKind::OutOfBounds
    );
    assert_eq!(kind(nor.erase(0, 1024)), NorFlashErrorKind::NotAligned);
    assert_eq!(kind(nor.erase(2048, 6144)), NorFlashErrorKind::OutOfBounds);
    assert_eq!(kind(nor.erase(2048, 0)), NorFlashErrorKind::OutOfBounds);
    let mut b = [0u8; 2];
    assert_eq!(kind(nor.read(4095, &mut b)), NorFlashErrorKind::OutOfBounds);
    assert_eq!(
        kind(nor.read(u32::MAX, &mut b)),
        NorFlashErrorKind::OutOfBounds
    );
    nor.read(4094, &mut b).unwrap();
    assert!(
        nor.flash().image().iter().all(|b| *b == 0xFF),
        "refused calls wrote nothing"
    );
}

// ---- embedded-storage binding ----------------------------------------------

fn assert_multiwrite<T: MultiwriteNorFlash>(_: &T) {}

#[test]
fn trait_constants_follow_the_model() {
    let nor = Esp32Flash::new(esp32(2)).unwrap();
    assert_multiwrite(&nor);
    assert_eq!(Esp32Flash::WRITE_SIZE, 4);
    assert_eq!(Esp32Flash::ERASE_SIZE, 4096);
    assert_eq!(nor.capacity(), 8192);
    // Units that disagree with the model are refused.
    assert!(Nor::<8, 4096>::new(esp32(1)).is_err());
    assert!(Nor::<4, 2048>::new(esp32(1)).is_err());
}

#[test]
fn multiwrite_only_for_models_that_allow_rewrites() {
    assert!(Nor::<4, 4096, true>::new(SimFlash::new(Preset::Nrf52.model(4096).unwrap())).is_ok());
    assert!(
        Nor::<8, 2048, true>::new(SimFlash::new(Preset::Stm32l4.model(2048).unwrap())).is_err()
    );
    let h7 = Preset::Stm32h7.model(128 * 1024).unwrap();
    assert!(Nor::<32, { 128 * 1024 }, true>::new(SimFlash::new(h7.clone())).is_err());
    assert!(Stm32h7Flash::new(SimFlash::new(h7)).is_ok());
}

// ---- backing ----------------------------------------------------------------

#[test]
fn file_backing_persists_across_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flash.img");
    let model = Preset::Esp32.model(4096 * 4).unwrap();
    {
        let mut f = SimFlash::create_file(model.clone(), &path).unwrap();
        f.program(4100, b"clawmem!").unwrap();
        f.erase(8192, 12288).unwrap();
        f.flush().unwrap();
    }
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk.len(), 4096 * 4);
    assert_eq!(&on_disk[4100..4108], b"clawmem!");
    let mut f = SimFlash::open_file(&model, &path).unwrap();
    let mut b = [0u8; 8];
    f.read(4100, &mut b).unwrap();
    assert_eq!(&b, b"clawmem!");
    f.program(0, &[0u8; 4]).unwrap();
    drop(f);
    assert_eq!(&std::fs::read(&path).unwrap()[0..4], &[0u8; 4]);
}

#[test]
fn opening_a_dump_sizes_the_flash_and_marks_written_words() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dump.bin");
    let mut dump = vec![0xFFu8; 3 * 128 * 1024];
    dump[64] = 0x12;
    std::fs::write(&path, &dump).unwrap();
    let h7 = Preset::Stm32h7.default_model();
    let mut f = SimFlash::open_file(&h7, &path).unwrap();
    assert_eq!(f.model().geometry.sector_count, 3);
    assert_eq!(f.word_writes(64), 1);
    assert_eq!(f.word_writes(96), 0);
    assert!(
        f.program(64, &[0u8; 32]).is_err(),
        "written word of a write-once part"
    );
    f.program(96, &[0u8; 32]).unwrap();

    std::fs::write(&path, vec![0xFFu8; 1000]).unwrap();
    let err = SimFlash::open_file(&h7, &path).unwrap_err().to_string();
    assert!(err.contains("dump.bin") && err.contains("1000"), "{err}");
    assert!(SimFlash::open_file(&h7, dir.path().join("missing.bin")).is_err());
}

// ---- counters -----------------------------------------------------------------

#[test]
fn counters_track_calls_bytes_wear_and_time() {
    let mut f = esp32(4);
    let mut b = [0u8; 100];
    f.read(0, &mut b).unwrap();
    f.program(0, &[0u8; 8]).unwrap(); // one 256 B page: 400 us
    f.program(252, &[0u8; 8]).unwrap(); // crosses a page boundary: 800 us
    f.erase(4096, 3 * 4096).unwrap(); // two sectors: 90 ms
    f.erase(4096, 2 * 4096).unwrap();
    let s = f.stats();
    assert_eq!((s.read_calls, s.read_bytes), (1, 100));
    assert_eq!((s.program_calls, s.programmed_bytes), (2, 16));
    assert_eq!((s.erase_calls, s.erases, s.erased_bytes), (2, 3, 3 * 4096));
    assert_eq!(s.erase_counts, vec![0, 2, 1, 0]);
    assert_eq!(s.erase_count_max(), 2);
    assert!((s.erase_count_mean() - 0.75).abs() < 1e-9);
    let expected_us = 100.0 * 25.0 / 1000.0 + 400.0 + 800.0 + 3.0 * 45_000.0;
    assert!(
        (s.device_time_us - expected_us).abs() < 1e-6,
        "{}",
        s.device_time_us
    );

    let json = s.to_json();
    for key in [
        "read_calls",
        "read_bytes",
        "program_calls",
        "programmed_bytes",
        "erase_calls",
        "erases",
        "erased_bytes",
        "write_budget_violations",
        "device_time_us",
        "erase_counts",
        "erase_count_max",
        "erase_count_mean",
    ] {
        assert!(json.get(key).is_some(), "missing {key}");
    }
    assert_eq!(json["erase_count_max"], 2);

    f.reset_counters();
    assert_eq!(f.stats().read_calls, 0);
    assert_eq!(
        f.stats().erase_counts,
        vec![0, 2, 1, 0],
        "wear survives a counter reset"
    );
}

// ---- power cuts ---------------------------------------------------------------

fn cut(at: CutPoint, tear: Tear) -> PowerCut {
    PowerCut { seed: 7, at, tear }
}

#[test]
fn power_cut_at_op_n_tears_that_call_and_blocks_the_rest() {
    let mut f = esp32(2);
    f.arm_power_cut(cut(CutPoint::Op(2), Tear::Prefix(6)));
    f.program(0, &[0x00; 8]).unwrap();
    f.erase(4096, 8192).unwrap();
    let err = f.program(16, &[0x11; 16]).unwrap_err();
    assert!(matches!(err, SimError::PowerCut(_)));
    assert_eq!(
        read_all(&f, 16, 16),
        [vec![0x11; 6], vec![0xFF; 10]].concat()
    );
    assert!(!f.is_powered());
    let mut b = [0u8; 4];
    assert_eq!(f.read(0, &mut b), Err(SimError::PowerOff));
    assert_eq!(f.program(64, &[0; 4]), Err(SimError::PowerOff));
    assert_eq!(f.erase(0, 4096), Err(SimError::PowerOff));
    assert_eq!(read_all(&f, 64, 4), vec![0xFF; 4]);
    f.restore_power();
    f.read(0, &mut b).unwrap();
    assert_eq!(b, [0; 4]);
    f.program(64, &[0; 4]).unwrap();
    assert_eq!(f.stats().power_cuts, 1);
}

#[test]
fn prefix_tear_extremes_are_clean_cuts() {
    let mut f = esp32(1);
    f.arm_power_cut(cut(CutPoint::Op(0), Tear::Prefix(0)));
    assert!(f.program(0, &[0; 8]).is_err());
    assert_eq!(read_all(&f, 0, 8), vec![0xFF; 8]);
    f.restore_power();
    f.arm_power_cut(cut(CutPoint::Op(0), Tear::Prefix(1000)));
    assert!(f.program(0, &[0; 8]).is_err());
    assert_eq!(read_all(&f, 0, 8), vec![0; 8]);
}

#[test]
fn bits_tear_lands_a_strict_subset_of_the_intended_clears() {
    let mut f = esp32(1);
    f.program(0, &[0xF0; 256]).unwrap();
    f.arm_power_cut(cut(CutPoint::Op(0), Tear::Bits));
    let data: Vec<u8> = (0..256u32).map(|i| (i * 37) as u8).collect();
    assert!(f.program(0, &data).is_err());
    let after = read_all(&f, 0, 256);
    let mut landed = 0;
    let mut missed = 0;
    for (i, (&a, &d)) in after.iter().zip(&data).enumerate() {
        let old = 0xF0u8;
        assert_eq!(a & !old, 0, "byte {i}: a bit went from 0 to 1");
        assert_eq!(a | (old & d), a | (old & d) | (a & old), "byte {i}");
        assert_eq!(
            (old & d) & !a,
            0,
            "byte {i}: a bit that should stay 1 was cleared"
        );
        landed += (old & !a).count_ones();
        missed += (a & !d & old).count_ones();
    }
    assert!(landed > 0 && missed > 0, "landed {landed}, missed {missed}");
}

#[test]
fn random_tear_scrambles_the_words_in_flight() {
    let mut f = esp32(1);
    f.arm_power_cut(cut(CutPoint::Op(0), Tear::Random));
    assert!(f.program(0, &[0x00; 64]).is_err());
    let after = read_all(&f, 0, 64);
    assert!(after.iter().any(|b| *b != 0x00) && after.iter().any(|b| *b != 0xFF));
    assert_eq!(
        read_all(&f, 64, 64),
        vec![0xFF; 64],
        "words outside the call untouched"
    );
}

#[test]
fn byte_cut_lands_exactly_n_bytes() {
    let mut f = esp32(1);
    f.arm_power_cut(cut(CutPoint::Byte(10), Tear::Prefix(0)));
    f.program(0, &[0; 8]).unwrap();
    assert!(matches!(f.program(8, &[0; 8]), Err(SimError::PowerCut(_))));
    let img = read_all(&f, 0, 16);
    assert_eq!(img.iter().filter(|b| **b == 0).count(), 10);
    assert_eq!(f.stats().programmed_bytes, 10);

    // A budget used up exactly: the next mutating call fails and changes nothing.
    let mut f = esp32(2);
    f.program(4096, &[0; 4]).unwrap();
    f.arm_power_cut(cut(CutPoint::Byte(4), Tear::Prefix(0)));
    f.program(0, &[0; 4]).unwrap();
    assert!(f.erase(4096, 8192).is_err());
    assert_eq!(read_all(&f, 4096, 4), vec![0; 4]);
}

#[test]
fn torn_erase_leaves_a_partly_erased_sector() {
    let mut f = esp32(1);
    f.program(0, &vec![0u8; 4096]).unwrap();
    f.arm_power_cut(cut(CutPoint::Op(0), Tear::Bits));
    assert!(f.erase(0, 4096).is_err());
    let img = f.image();
    let ones: u32 = img.iter().map(|b| b.count_ones()).sum();
    assert!(ones > 0 && ones < 4096 * 8, "ones = {ones}");
    assert_eq!(f.stats().erase_counts, vec![1]);

    let mut f = esp32(2);
    f.program(0, &vec![0u8; 8192]).unwrap();
    f.arm_power_cut(cut(CutPoint::Op(0), Tear::Prefix(4096 + 100)));
    assert!(f.erase(0, 8192).is_err());
    let img = f.image();
    assert!(img[..4196].iter().all(|b| *b == 0xFF));
    assert!(img[4196..].iter().all(|b| *b == 0x00));
}

#[test]
fn cut_randomness_is_deterministic_per_seed() {
    let run = |seed: u64, tear: Tear| {
        let mut f = esp32(1);
        f.program(0, &[0xF0; 512]).unwrap();
        f.arm_power_cut(PowerCut {
            seed,
            at: CutPoint::Op(1),
            tear,
        });
        f.program(512, &[0x0F; 512]).unwrap();
        let _ = f.program(0, &[0x00; 512]);
        f.restore_power();
        f.arm_power_cut(PowerCut {
            seed,
            at: CutPoint::Op(0),
            tear,
        });
        let _ = f.erase(0, 4096);
        f.image()
    };
    for tear in [Tear::Bits, Tear::Random] {
        assert_eq!(run(1, tear), run(1, tear));
        assert_ne!(run(1, tear), run(2, tear));
    }
}

#[test]
fn replay_strings_round_trip() {
    for c in [
        cut(CutPoint::Op(12), Tear::Bits),
        cut(CutPoint::Op(0), Tear::Random),
        cut(CutPoint::Byte(4097), Tear::Prefix(3)),
    ] {
        let s = c.to_string();
        assert_eq!(s.parse::<PowerCut>().unwrap(), c, "{s}");
    }
    assert_eq!(
        "seed=7;cut=op:12;tear=bits".parse::<PowerCut>().unwrap(),
        cut(CutPoint::Op(12), Tear::Bits)
    );
    for bad in [
        "",
        "seed=x;cut=op:1",
        "cut=page:3",
        "cut=op:1;tear=half",
        "cut=op:1;colour=red",
    ] {
        let e = bad.parse::<PowerCut>().unwrap_err().to_string();
        assert!(e.starts_with("bad fault replay string"), "{bad}: {e}");
    }
}

// ---- injected errors ----------------------------------------------------------

#[test]
fn one_shot_and_persistent_errors() {
    let mut f = esp32(2);
    let mut b = [0u8; 4];
    f.inject_error(InjectedError {
        op: OpKind::Read,
        at_call: 1,
        persistent: false,
    });
    f.read(0, &mut b).unwrap();
    assert!(matches!(f.read(0, &mut b), Err(SimError::Injected(_))));
    f.read(0, &mut b).unwrap();

    f.inject_error(InjectedError {
        op: OpKind::Program,
        at_call: 0,
        persistent: true,
    });
    for _ in 0..3 {
        assert!(matches!(f.program(0, &[0; 4]), Err(SimError::Injected(_))));
    }
    assert_eq!(
        read_all(&f, 0, 4),
        vec![0xFF; 4],
        "a failed program writes nothing"
    );
    f.read(0, &mut b).unwrap();
    f.erase(0, 4096).unwrap();
    f.clear_faults();
    f.program(0, &[0; 4]).unwrap();

    f.inject_error(InjectedError {
        op: OpKind::Erase,
        at_call: 0,
        persistent: false,
    });
    assert!(f.erase(0, 4096).is_err());
    assert_eq!(
        read_all(&f, 0, 4),
        vec![0; 4],
        "a failed erase erases nothing"
    );
    f.erase(0, 4096).unwrap();
    assert_eq!(f.stats().failed_calls, 5);
}

// ---- bit flips and snapshots ----------------------------------------------------

#[test]
fn bit_flips_at_rest() {
    let mut f = esp32(2);
    f.flip_bit(5, 3).unwrap();
    assert_eq!(read_all(&f, 5, 1), vec![0xFF ^ 0x08]);
    assert!(f.flip_bit(8192, 0).is_err());
    assert!(f.flip_bit(0, 8).is_err());
    let before = f.stats().clone();
    let flips = f.flip_random_bits(10, 99).unwrap();
    assert_eq!(flips.len(), 10);
    assert_eq!(f.stats(), &before, "bit rot is not a flash call");
    let mut g = esp32(2);
    g.flip_bit(5, 3).unwrap();
    assert_eq!(
        g.flip_random_bits(10, 99).unwrap(),
        flips,
        "same seed, same flips"
    );
    assert_eq!(g.image(), f.image());
}

#[test]
fn snapshots_are_independent_copies() {
    let mut f = esp32(4);
    f.program(0, b"abcd").unwrap();
    let snap = f.snapshot();
    f.program(4, b"efgh").unwrap();
    f.erase(4096, 8192).unwrap();
    assert_eq!(read_all(&snap, 0, 8), b"abcd\xFF\xFF\xFF\xFF");
    assert_eq!(snap.stats().program_calls, 1);
    assert_eq!(snap.stats().erase_counts, vec![0; 4]);
    let mut fork = snap.snapshot();
    fork.program(4, b"wxyz").unwrap();
    assert_eq!(read_all(&f, 4, 4), b"efgh");
    assert_eq!(read_all(&fork, 4, 4), b"wxyz");
}

#[test]
fn custom_models_are_simulated_too() {
    let g = Geometry::new(2, 128, 5).unwrap();
    let t = Preset::Generic.default_model().timings;
    let mut f = SimFlash::new(Model::custom(g, WriteRule::Once, t));
    assert_eq!(f.capacity(), 640);
    f.program(126, &[0, 0]).unwrap();
    assert!(f.program(126, &[0, 0]).is_err());
    assert!(f.program(1, &[0, 0]).is_err());
}
