//! The engine's source keeps its shape (issue 11): every module of
//! `crates/clawmem/src` uses only modules of its own layer or of layers
//! below it, and no source file is over 1,000 lines.
//!
//! Invariants checked: each `crate::<module>` a file names in code (doc
//! comments and `//` comments are left out: a doc link is no dependency)
//! has a layer no higher than the file's own; every file of the crate has
//! a layer in the table below (a new module must be placed in it); no file
//! has more than 1,000 lines.

mod source;

use std::fs;
use std::path::{Path, PathBuf};

/// The layers, bottom first. A module may use its own layer and those
/// before it. The pure ESP-Claw rules sit below the flash layers and never
/// touch flash; `rebuild` (host only) sits on the rules.
const LAYERS: &[&[&str]] = &[
    &["error", "testing"],
    &["text", "layout", "chdx", "profile"],
    &["naming", "turns", "backend", "chat", "memory"],
    &["rebuild"],
    &["log"],
    &["session"],
    &["cursor"],
    &["store"],
];

const MAX_LINES: usize = 1000;

fn src() -> PathBuf {
    source::repo_root().join("crates/clawmem/src")
}

/// The top-level module a file belongs to (`store/memory/api.rs` -> store).
fn module_of(rel: &Path) -> String {
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The modules `crate::X` names in the code of `text` (comments left out).
fn uses(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
        }
    }
    out
}

#[test]
fn no_module_uses_a_higher_layer_and_no_file_is_over_1000_lines() {
    let root = src();
    let all = source::rust_files(&root);
    assert!(all.len() > 20, "read {} files under {root:?}", all.len());
    let mut problems = Vec::new();
    for p in &all {
        let rel = p.strip_prefix(&root).unwrap();
        let text = fs::read_to_string(p).unwrap();
        let lines = text.lines().count();
        if lines > MAX_LINES {
            problems.push(format!(
                "{}: {lines} lines (at most {MAX_LINES})",
                rel.display()
            ));
        }
        if rel == Path::new("lib.rs") {
            continue;
        }
        let own = module_of(rel);
        let Some(own_layer) = layer(&own) else {
            problems.push(format!("{}: module `{own}` has no layer", rel.display()));
            continue;
        };
        for used in uses(&text) {
            match layer(&used) {
                Some(l) if l <= own_layer => {}
                Some(l) => problems.push(format!(
                    "{}: `{own}` (layer {own_layer}) uses `crate::{used}` (layer {l})",
                    rel.display()
                )),
                // `crate::Store` and other re-exports from lib.rs: the
                // facade, named only by the facade's own layer.
                None if own == "store" => {}
                None => problems.push(format!(
                    "{}: `{own}` uses `crate::{used}`, which has no layer",
                    rel.display()
                )),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_checker_sees_a_back_edge() {
    // A lower layer naming a higher one is caught; comments are not code.
    let text = "use crate::store::Store;\n/// [`x`](crate::store::Store)\n";
    assert_eq!(uses(text), vec!["store".to_string()]);
    assert!(layer("log").unwrap() < layer("store").unwrap());
    assert_eq!(module_of(Path::new("store/memory/api.rs")), "store");
}
