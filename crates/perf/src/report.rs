//! The end of every run: one human line, then one JSON line, both on stdout (progress goes to
//! stderr), so `grep '^{'` picks the results out of a log.

use serde_json::{json, Value};

/// Prints the two result lines. `params` are the flags of the run, `results` its figures.
pub fn print(scenario: &str, label: Option<&str>, target: &str, human: &str, params: Value, results: Value) {
    let tag = label.unwrap_or(target);
    println!("{scenario} [{tag}]: {human}");
    let line = json!({
        "scenario": scenario,
        "label": label,
        "target": target,
        "params": params,
        "results": results,
    });
    println!("{line}");
}
