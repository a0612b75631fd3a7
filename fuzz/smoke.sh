#!/usr/bin/env bash
# Fuzz smoke run for CI: builds every cargo-fuzz target in this directory and runs each for
# FUZZ_SMOKE_SECONDS (default 20) starting from its committed corpus (fuzz/corpus/<target>).
# New inputs go to a throwaway directory, so the committed corpus stays as it is. A crash fails
# the script (the input is kept under fuzz/artifacts/<target>/). The long campaign and how to run
# it: docs/security.md "Fuzzing".
#
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`, ~40 s). Only a stable toolchain is
# installed, so RUSTC_BOOTSTRAP=1 lets it pass the nightly-only flags cargo-fuzz uses.
# FUZZ_SANITIZER (default none: Rust is memory-safe here, and debug assertions and overflow
# checks stay on either way) may be set to address for an ASan build.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v cargo-fuzz > /dev/null; then
    echo "fuzz/smoke.sh: cargo-fuzz is not installed (cargo install cargo-fuzz --locked)" >&2
    exit 1
fi
export RUSTC_BOOTSTRAP=1
seconds="${FUZZ_SMOKE_SECONDS:-20}"
sanitizer="${FUZZ_SANITIZER:-none}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cargo fuzz build -s "$sanitizer"
for target in $(cargo fuzz list); do
    mkdir -p "$work/$target" "corpus/$target"
    echo "== fuzz smoke: $target (${seconds}s)"
    log="$work/$target.log"
    if ! cargo fuzz run -s "$sanitizer" "$target" "$work/$target" "corpus/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 > "$log" 2>&1; then
        tail -n 60 "$log" >&2
        echo "fuzz/smoke.sh: $target failed; the input is in fuzz/artifacts/$target/" >&2
        exit 1
    fi
    grep -E "^(stat::number_of_executed_units|Done )" "$log" || true
done
echo "fuzz smoke: every target ran ${seconds}s without a crash"
