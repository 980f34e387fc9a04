//! The firmware example's coverage of the API (issue 11).
//!
//! `examples/firmware` is what `scripts/firmware-size.sh` measures, so it
//! must call every public `Store` operation: an operation it leaves out is
//! code the size report does not count. The constructors that return the
//! store by value (`format`, `mount`, `format_in`, `mount_in`) pass a whole
//! `Store` through the stack, past the 4 KiB budget: they are behind the
//! `by-value` feature, which a firmware leaves off, and the example builds
//! its store in place (`format_into`, `mount_into`).
//!
//! The public operations are read from the source: every `pub fn` of an
//! `impl ... Store<...>` block under `crates/clawmem/src/store`, with the
//! `#[cfg(...)]` attributes on it or on its block. Those of a block that
//! asks for `F: MultiwriteNorFlash` (rewriting a word in place) are left
//! out while the example's flash is not one.

mod source;

use std::fs;
use std::path::PathBuf;

/// A public operation of `Store` and the `cfg` attributes that gate it.
struct Op {
    name: String,
    file: PathBuf,
    cfgs: Vec<String>,
    /// Its block asks for `F: MultiwriteNorFlash`.
    multiwrite: bool,
}

fn root() -> PathBuf {
    source::repo_root()
}

/// The `#[cfg(...)]` lines right above line `i` (attributes and doc
/// comments between them and the item allowed).
fn cfgs_above(lines: &[&str], i: usize) -> Vec<String> {
    let mut cfgs = Vec::new();
    for line in lines[..i].iter().rev() {
        let t = line.trim();
        if t.starts_with("#[cfg") {
            cfgs.push(t.to_string());
        } else if !(t.starts_with("#[") || t.starts_with("///")) {
            break;
        }
    }
    cfgs
}

fn store_ops() -> Vec<Op> {
    let files = source::rust_files(&root().join("crates/clawmem/src/store"));
    let mut ops = Vec::new();
    for file in files {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // The block a line is in, if it is an inherent `Store` impl: its
        // cfgs, and whether it asks for a multiwrite flash.
        let mut block: Option<(Vec<String>, bool)> = None;
        for (i, line) in lines.iter().enumerate() {
            if line.starts_with("mod tests") || line.starts_with("pub(crate) mod tests") {
                break;
            }
            if line.starts_with("impl") {
                // The header, over as many lines as rustfmt gave it.
                let end = (i..lines.len()).find(|&j| lines[j].contains('{')).unwrap();
                let header = lines[i..=end].join(" ");
                block = (header.contains("Store<") && !header.contains(" for "))
                    .then(|| (cfgs_above(&lines, i), header.contains("MultiwriteNorFlash")));
                continue;
            }
            if !line.starts_with(char::is_whitespace) && !matches!(*line, "" | "{" | "}") {
                if !line.starts_with("#[") && !line.starts_with("//") {
                    block = None;
                }
                continue;
            }
            let Some((block_cfgs, multiwrite)) = &block else {
                continue;
            };
            let Some(rest) = line.strip_prefix("    pub fn ") else {
                continue;
            };
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let mut cfgs = cfgs_above(&lines, i);
            cfgs.extend(block_cfgs.iter().cloned());
            ops.push(Op {
                name,
                file: file.clone(),
                cfgs,
                multiwrite: *multiwrite,
            });
        }
    }
    ops
}

fn is_by_value(op: &Op) -> bool {
    op.cfgs.iter().any(|c| c.contains("\"by-value\""))
}

/// Operations of the sector table (format 10, unreleased, off by default):
/// not in the firmware the size report measures until the feature is.
fn is_format_10(op: &Op) -> bool {
    op.cfgs.iter().any(|c| c.contains("\"sector-table\""))
}

/// Whether the example's `api.rs` calls `name` (as a method or a path).
fn calls(api: &str, name: &str) -> bool {
    [".", "::"]
        .iter()
        .any(|sep| api.contains(&format!("{sep}{name}(")))
}

#[test]
fn the_firmware_example_calls_every_public_store_operation() {
    let ops = store_ops();
    // The parser found the API (56 operations when this test was written,
    // one of them for a multiwrite flash).
    assert!(
        ops.len() >= 50,
        "only {} public Store operations found",
        ops.len()
    );
    assert!(ops.iter().any(|op| op.multiwrite));
    let api = fs::read_to_string(root().join("examples/firmware/src/api.rs")).unwrap();
    // Operations that rewrite a word in place need a `MultiwriteNorFlash`;
    // the example's flash (the STM32L4's, ECC over each double word) is not
    // one, so a firmware on it cannot link them.
    let flash = fs::read_to_string(root().join("examples/firmware/src/flash.rs")).unwrap();
    let multiwrite = flash.contains("impl MultiwriteNorFlash for");
    let missing: Vec<String> = ops
        .iter()
        .filter(|op| !is_by_value(op) && !is_format_10(op) && (multiwrite || !op.multiwrite))
        .filter(|op| !calls(&api, &op.name))
        .map(|op| format!("{} ({})", op.name, op.file.display()))
        .collect();
    assert!(
        missing.is_empty(),
        "examples/firmware/src/api.rs does not call: {missing:?}"
    );
}

#[test]
fn only_the_by_value_constructors_are_left_out_of_firmware() {
    let ops = store_ops();
    let mut by_value: Vec<&str> = ops
        .iter()
        .filter(|op| is_by_value(op))
        .map(|op| op.name.as_str())
        .collect();
    by_value.sort_unstable();
    assert_eq!(by_value, ["format", "format_in", "mount", "mount_in"]);
    // The example builds its store in place, and does not turn the
    // feature on.
    let api = fs::read_to_string(root().join("examples/firmware/src/api.rs")).unwrap();
    for name in by_value {
        assert!(!calls(&api, name), "the firmware example calls {name}");
    }
    assert!(calls(&api, "mount_into") && calls(&api, "format_into"));
    let manifest = fs::read_to_string(root().join("examples/firmware/Cargo.toml")).unwrap();
    assert!(!manifest.contains("by-value"));
}
