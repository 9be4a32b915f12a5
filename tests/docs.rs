//! Static checks that the docs match the code (file reads only, no cluster):
//!
//! - every section citation in the code (`docs/design.md §4`, `` `docs/drain-contract.md` §9 ``,
//!   a bare `§7` after one of those) names a document that exists and a section it has;
//! - the README's architecture table names every source file of `src/`.
//!
//! A bare `§N` refers to the last document named before it in the same file, as the comments
//! write it (`docs/design.md §4`, `§7`); one with no document before it is dangling.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The folders whose files may cite the docs, relative to the repository root.
const SCANNED: [&str; 6] = [
    "src",
    "webhook/src",
    "tests",
    "benches",
    "certs/src",
    "packaging/src",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, skipping build output.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("readable directory entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The numbered sections of a Markdown document: `## 4. Admission` gives `4`, `### 4.2 Caches`
/// gives `4.2`.
fn sections(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| {
            let heading = l.strip_prefix('#')?.trim_start_matches('#').trim_start();
            let number: String = heading
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let number = number.trim_end_matches('.');
            (!number.is_empty()).then(|| number.to_string())
        })
        .collect()
}

/// One citation: the line it is on, the document (`None`: none named before it) and the
/// section.
#[derive(Debug, PartialEq, Eq)]
struct Citation {
    line: usize,
    doc: Option<String>,
    section: String,
}

/// The section number right after a `§` (and optional spaces) at `rest`: `7`, `5.3`; a trailing
/// dot ends a sentence and is not part of it.
fn section_at(rest: &str) -> Option<String> {
    let n: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let n = n.trim_end_matches('.');
    (!n.is_empty() && n.starts_with(|c: char| c.is_ascii_digit())).then(|| n.to_string())
}

/// The citations of one file's text, each resolved to the last `docs/<name>.md` named before
/// it in the file.
fn citations(text: &str) -> Vec<Citation> {
    let mut found = Vec::new();
    let mut doc: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        // Walk the line's document names and section marks in order.
        let mut rest = line;
        loop {
            let next_doc = rest.find("docs/");
            let next_mark = rest.find('§');
            match (next_doc, next_mark) {
                (Some(d), m) if m.is_none_or(|m| d < m) => {
                    let tail = &rest[d..];
                    let name: String = tail
                        .chars()
                        .take_while(|c| {
                            c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.')
                        })
                        .collect();
                    let name = name.trim_end_matches('.');
                    if name.ends_with(".md") {
                        doc = Some(name.to_string());
                    }
                    rest = &tail[name.len().max(1)..];
                }
                (_, Some(m)) => {
                    let tail = &rest[m + '§'.len_utf8()..];
                    if let Some(section) = section_at(tail) {
                        found.push(Citation {
                            line: i + 1,
                            doc: doc.clone(),
                            section,
                        });
                    }
                    rest = tail;
                }
                (None, None) => break,
                (Some(_), None) => unreachable!("handled by the first arm"),
            }
        }
    }
    found
}

/// Every citation of the scanned folders that does not resolve, as `file:line: why`, and how
/// many citations were checked.
fn dangling() -> (Vec<String>, usize) {
    let mut files = Vec::new();
    for dir in SCANNED {
        rust_files(&root().join(dir), &mut files);
    }
    files.sort();
    // This file's own samples of citations are no citations.
    files.retain(|f| !f.ends_with("tests/docs.rs"));
    let mut docs: BTreeMap<String, Option<BTreeSet<String>>> = BTreeMap::new();
    let mut bad = Vec::new();
    let mut checked = 0;
    for file in files {
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let shown = file
            .strip_prefix(root())
            .unwrap_or(&file)
            .display()
            .to_string();
        for c in citations(&text) {
            checked += 1;
            let Some(doc) = &c.doc else {
                bad.push(format!(
                    "{shown}:{}: §{} names no document (write `docs/<name>.md §{}`)",
                    c.line, c.section, c.section
                ));
                continue;
            };
            let known = docs.entry(doc.clone()).or_insert_with(|| {
                std::fs::read_to_string(root().join(doc))
                    .ok()
                    .map(|t| sections(&t))
            });
            match known {
                None => bad.push(format!("{shown}:{}: {doc} does not exist", c.line)),
                Some(s) if !s.contains(&c.section) => bad.push(format!(
                    "{shown}:{}: {doc} has no §{} (its sections: {})",
                    c.line,
                    c.section,
                    s.iter().cloned().collect::<Vec<_>>().join(", ")
                )),
                Some(_) => {}
            }
        }
    }
    (bad, checked)
}

#[test]
fn every_section_citation_resolves() {
    let (bad, checked) = dangling();
    // The code cites the docs some hundred times; far fewer means the scan found nothing.
    assert!(
        checked > 100,
        "only {checked} citations found: the scanner is broken"
    );
    assert!(
        bad.is_empty(),
        "{} citation(s) of {checked} do not resolve:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn the_scanner_reads_each_form_of_citation() {
    let text = "//! Wiring (`docs/design.md §5`), the caches (`docs/design.md §4`, `§7`).\n\
                // §2 of the drain contract: `docs/drain-contract.md` §9; see §5.3.\n\
                /// Upstream's texts (docs/compat.md §8.)\n";
    let cites = citations(text);
    let got: Vec<(usize, Option<&str>, &str)> = cites
        .iter()
        .map(|c| (c.line, c.doc.as_deref(), c.section.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, Some("docs/design.md"), "5"),
            (1, Some("docs/design.md"), "4"),
            (1, Some("docs/design.md"), "7"),
            (2, Some("docs/design.md"), "2"),
            (2, Some("docs/drain-contract.md"), "9"),
            (2, Some("docs/drain-contract.md"), "5.3"),
            (3, Some("docs/compat.md"), "8"),
        ]
    );
    assert_eq!(
        citations("// see §3\n"),
        vec![Citation {
            line: 1,
            doc: None,
            section: "3".into()
        }]
    );
    assert_eq!(
        sections("# Design\n## 1. Reconcile\n### 1.2 Steps\n## Map\n"),
        BTreeSet::from(["1".to_string(), "1.2".to_string()])
    );
}

/// The README's `## Architecture` section, up to the next heading.
fn architecture_table() -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let start = readme
        .find("\n## Architecture")
        .expect("README has an Architecture section");
    let body = &readme[start + 1..];
    let end = body[3..].find("\n## ").map_or(body.len(), |e| e + 3);
    body[..end].to_string()
}

#[test]
fn the_readme_architecture_table_names_every_source_file() {
    let table = architecture_table();
    let cells: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with('|'))
        .flat_map(|l| l.split('|'))
        .collect();
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut missing = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(root())
            .expect("under the root")
            .to_string_lossy()
            .replace('\\', "/");
        // Named whole (`src/node.rs`), or as a folder with the rest of its path in the same
        // cell (`src/watch/` (`relist.rs`, `nodes/mod.rs`)).
        let named = cells.iter().any(|cell| {
            cell.contains(&format!("`{rel}`"))
                || rel.match_indices('/').any(|(i, _)| {
                    let (folder, rest) = rel.split_at(i + 1);
                    folder != "src/"
                        && cell.contains(&format!("`{folder}`"))
                        && cell.contains(&format!("`{rest}`"))
                })
        });
        if !named {
            missing.push(rel);
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "the README's architecture table does not name: {}",
        missing.join(", ")
    );
}
