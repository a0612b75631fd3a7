//! Every path that ARCHITECTURE.md's "Where is X?" table names exists, so the map a newcomer reads
//! first never sends them to a file that moved or was renamed.
//!
//! A cell names paths in backticks: full paths from the repository root (`crates/…`, `tests/…`,
//! `scripts/…`, `fuzz/…`, `docs/…`, `src/…`), with `{a,b}` alternatives, `*` or `<placeholder>` for
//! any one name; or short paths (`routes/time.rs`, `topic.rs`) that are read inside the crate of the
//! last full path before them in the same row.

use std::path::{Path, PathBuf};

const ROOT_DIRS: [&str; 6] = ["crates/", "tests/", "scripts/", "fuzz/", "docs/", "src/"];

/// The architecture map names only files and folders that exist.
#[test]
fn every_path_in_the_where_is_x_table_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let table = map.split("## Where is X?").nth(1).expect("a \"Where is X?\" section");
    let files = all_files(root);
    let mut missing = Vec::new();
    let mut checked = 0;
    for row in table.lines().filter(|line| line.starts_with('|')) {
        let mut crate_dir: Option<String> = None;
        for token in backticked(row).filter(|token| looks_like_path(token)) {
            checked += 1;
            if let Some(dir) = crate_of(token) {
                crate_dir = Some(dir);
            }
            if !exists(token, crate_dir.as_deref(), &files) {
                missing.push(format!("{token}   (in: {})", row.trim()));
            }
        }
    }
    assert!(checked > 50, "the table should name many paths; found {checked}");
    assert!(missing.is_empty(), "ARCHITECTURE.md names paths that do not exist:\n{}", missing.join("\n"));
}

/// Rule 5: the HTTP API and the SQS endpoint reach the broker only through the typed requests
/// of `crates/broker/src/requests/`. Their code outside tests names no `&Broker` or
/// `&mut Broker` (a closure or function over the broker) and no `Broker::` function but the
/// stand-in broker task's `Broker::new` (`BrokerHandle::standalone`). `crates/mgmt/src/jobs.rs`
/// is the broker task's side of their jobs (`JobRunner`, run by the server's broker task), so it
/// holds the broker.
#[test]
fn front_ends_reach_the_broker_only_through_typed_requests() {
    let found =
        lines_in_sources(&["crates/mgmt/src/", "crates/sqs/src/"], 20, broker_access_outside_tests, |f| {
            f != "crates/mgmt/src/jobs.rs"
        });
    assert!(found.is_empty(), "front-end code reaches into the broker:\n{}", found.join("\n"));
    // The check itself finds what it is for.
    let closure = "async fn f(h: &BrokerHandle) { h.run(|b: &mut Broker, now| b.purge()).await }";
    assert_eq!(broker_access_outside_tests(closure).len(), 1);
    let tests_only = "fn f() {}\n#[cfg(test)]\nmod tests { fn g(b: &Broker) {} }";
    assert_eq!(broker_access_outside_tests(tests_only).len(), 0);
}

/// Rule 3: the sans-IO crates keep no closure to call back later (a `Box<dyn Fn…>`): what a
/// driver waits for comes out as effects and notices (`crates/broker/src/notices.rs`).
#[test]
fn the_core_keeps_no_callback_into_its_driver() {
    let core = ["crates/wire/src/", "crates/session/src/", "crates/broker/src/"];
    let found = lines_in_sources(&core, 50, stored_closures_outside_tests, |_| true);
    assert!(found.is_empty(), "the core keeps callbacks:\n{}", found.join("\n"));
    let notice = "pub type CommitNotice = Box<dyn FnOnce(Result<(), DefinitionNotStored>) + Send>;";
    assert_eq!(stored_closures_outside_tests(notice).len(), 1);
}

/// Rule 1: `wire`, `session` and `broker` do no I/O and read no clock: outside their tests they
/// name no file, socket, thread, tokio or clock call, and none depends on tokio.
#[test]
fn the_core_does_no_io_and_reads_no_clock() {
    let core = ["crates/wire/src/", "crates/session/src/", "crates/broker/src/"];
    let found = lines_in_sources(&core, 50, io_outside_tests, |_| true);
    assert!(found.is_empty(), "the core does I/O or reads a clock:\n{}", found.join("\n"));
    assert_eq!(io_outside_tests("let now = SystemTime::now();\nlet f = std::fs::read(p);").len(), 2);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for krate in ["wire", "session", "broker"] {
        let manifest =
            std::fs::read_to_string(root.join(format!("crates/{krate}/Cargo.toml"))).expect("a manifest");
        let dependencies = manifest.split("[dev-dependencies]").next().unwrap_or_default();
        assert!(!dependencies.lines().any(|l| l.starts_with("tokio")), "crates/{krate} depends on tokio");
    }
}

/// The lines of `source`, before its `#[cfg(test)]` module, that do I/O, spawn or read a clock.
fn io_outside_tests(source: &str) -> Vec<(usize, &str)> {
    const CALLS: [&str; 9] = [
        "std::fs",
        "TcpStream",
        "TcpListener",
        "UdpSocket",
        "SystemTime::now",
        "Instant::now",
        "thread::spawn",
        "tokio::",
        "std::process",
    ];
    outside_tests(source).filter(|(_, line)| CALLS.iter().any(|call| line.contains(call))).collect()
}

/// The lines `pick` picks in the Rust sources under `dirs` that `keep` keeps (more than
/// `at_least` of them, so a moved folder cannot pass unchecked), as `file:line: code`.
fn lines_in_sources(
    dirs: &[&str],
    at_least: usize,
    pick: fn(&str) -> Vec<(usize, &str)>,
    keep: impl Fn(&str) -> bool,
) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files: Vec<String> = all_files(root)
        .into_iter()
        .filter(|f| dirs.iter().any(|dir| f.starts_with(dir)) && f.ends_with(".rs") && keep(f))
        .collect();
    assert!(files.len() > at_least, "sources under {dirs:?}: {}", files.len());
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(root.join(file)).expect("a source file");
        found.extend(pick(&text).into_iter().map(|(line, code)| format!("{file}:{line}: {code}")));
    }
    found
}

/// The lines of `source`, before its `#[cfg(test)]` module, that name a boxed closure.
fn stored_closures_outside_tests(source: &str) -> Vec<(usize, &str)> {
    let boxed =
        |line: &str| ["Box<dyn Fn", "Box<dyn FnOnce", "Box<dyn FnMut"].iter().any(|c| line.contains(c));
    outside_tests(source).filter(|(_, line)| boxed(line)).collect()
}

/// The lines of `source`, before its `#[cfg(test)]` module, that name the broker itself.
fn broker_access_outside_tests(source: &str) -> Vec<(usize, &str)> {
    let names_broker = |line: &str| {
        let functions = whole_words(line, "Broker::").filter(|rest| !rest.starts_with("new(")).count();
        whole_words(line, "&Broker").next().is_some()
            || whole_words(line, "&mut Broker").next().is_some()
            || functions > 0
    };
    outside_tests(source).filter(|(_, line)| names_broker(line)).collect()
}

/// The code lines (numbered from 1) of `source` before its `#[cfg(test)]` module.
fn outside_tests(source: &str) -> impl Iterator<Item = (usize, &str)> {
    source
        .lines()
        .enumerate()
        .take_while(|(_, line)| line.trim() != "#[cfg(test)]")
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .map(|(number, line)| (number + 1, line.trim()))
}

/// What follows each occurrence of `word` in `line` that is not part of a longer name
/// (`&Broker` is not `&BrokerHandle`, `Broker::` is not `WeakBroker::`).
fn whole_words<'l>(line: &'l str, word: &'l str) -> impl Iterator<Item = &'l str> + 'l {
    let is_name = |c: char| c.is_alphanumeric() || c == '_';
    line.match_indices(word).filter_map(move |(at, _)| {
        let rest = &line[at + word.len()..];
        let before = line[..at].chars().next_back();
        let after = if word.ends_with("::") { None } else { rest.chars().next() };
        let standalone = !before.is_some_and(|c| is_name(c) && word.starts_with(|w: char| is_name(w)))
            && !after.is_some_and(is_name);
        standalone.then_some(rest)
    })
}

/// The pieces of a table row between backticks.
fn backticked(row: &str) -> impl Iterator<Item = &str> {
    row.split('`').skip(1).step_by(2)
}

/// A token is a path when it names a file with an extension we keep or a folder from the root.
fn looks_like_path(token: &str) -> bool {
    !token.contains(' ')
        && (ROOT_DIRS.iter().any(|dir| token.starts_with(dir))
            || [".rs", ".py", ".sh", ".md", ".java"].iter().any(|ext| token.ends_with(ext)))
}

/// `crates/NAME/` when the token is a full path inside a crate.
fn crate_of(token: &str) -> Option<String> {
    let rest = token.strip_prefix("crates/")?;
    let name = rest.split('/').next()?;
    Some(format!("crates/{name}/"))
}

/// Whether some repository file matches the token, read as a full path or inside `crate_dir`.
fn exists(token: &str, crate_dir: Option<&str>, files: &[String]) -> bool {
    let patterns = expand_braces(token);
    let full = ROOT_DIRS.iter().any(|dir| token.starts_with(dir));
    patterns.iter().all(|pattern| {
        files.iter().any(|file| {
            if full {
                return matches(pattern, file);
            }
            let in_crate = crate_dir.is_none_or(|dir| file.starts_with(dir));
            matches(&format!("crates/{pattern}"), file) || (in_crate && ends_with_pattern(file, pattern))
        })
    })
}

/// `a/{b,c}.rs` → `a/b.rs`, `a/c.rs` (one level of braces, as the table uses).
fn expand_braces(token: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (token.find('{'), token.find('}')) else {
        return vec![token.to_string()];
    };
    let (head, tail) = (&token[..open], &token[close + 1..]);
    token[open + 1..close].split(',').map(|alt| format!("{head}{alt}{tail}")).collect()
}

/// Whether `file` ends with the path `pattern` at a `/` boundary.
fn ends_with_pattern(file: &str, pattern: &str) -> bool {
    let parts = file.split('/').count();
    let wanted = pattern.trim_end_matches('/').split('/').count();
    parts >= wanted && {
        let suffix: Vec<&str> = file.split('/').skip(parts - wanted).collect();
        matches(pattern, &suffix.join("/"))
    }
}

/// Path match where `*` and `<name>` stand for one path component or part of one; a pattern ending
/// in `/` names a folder, matched by any file inside it.
fn matches(pattern: &str, file: &str) -> bool {
    if let Some(dir) = pattern.strip_suffix('/') {
        return file.starts_with(&format!("{dir}/"));
    }
    let (pattern_parts, file_parts): (Vec<&str>, Vec<&str>) =
        (pattern.split('/').collect(), file.split('/').collect());
    pattern_parts.len() == file_parts.len()
        && pattern_parts.iter().zip(&file_parts).all(|(pattern, name)| component_matches(pattern, name))
}

fn component_matches(pattern: &str, name: &str) -> bool {
    let wildcard = match (pattern.find('<'), pattern.find('>')) {
        (Some(open), Some(close)) if open < close => Some((&pattern[..open], &pattern[close + 1..])),
        _ => pattern.find('*').map(|star| (&pattern[..star], &pattern[star + 1..])),
    };
    match wildcard {
        Some((head, tail)) => {
            name.len() > head.len() + tail.len() && name.starts_with(head) && name.ends_with(tail)
        }
        None => pattern == name,
    }
}

/// Every file under the repository root, as `/`-separated relative paths (build output skipped).
fn all_files(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut dirs: Vec<PathBuf> = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if name == "target" || name == ".git" || name == "node_modules" {
                continue;
            }
            if path.is_dir() {
                dirs.push(path);
            } else if let Ok(relative) = path.strip_prefix(root) {
                files.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    files
}
