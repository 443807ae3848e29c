#!/usr/bin/env bash
# Format and lint the tree: ruff format, then ruff check --fix.
set -euo pipefail
cd "$(dirname "$0")"
ruff format tilelang testing examples benchmark
ruff check --fix tilelang testing examples benchmark
