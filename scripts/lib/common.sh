# Shared helpers for the scripts in this folder. Source it; it defines functions only.

# The repository root (the folder holding Cargo.toml).
repo_root() {
  cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd
}

say() { printf '%s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# Installs the pinned Azurite (tools/azurite) with `npm ci` when it is missing or its lock file
# changed since the last install.
ensure_azurite_installed() {
  local root dir stamp
  root=$(repo_root)
  dir="$root/tools/azurite"
  stamp="$dir/node_modules/.installed-lock"
  command -v node >/dev/null || die "node is not installed (Azurite needs Node.js and npm)"
  command -v npm >/dev/null || die "npm is not installed (Azurite needs Node.js and npm)"
  if [ -f "$stamp" ] && cmp -s "$stamp" "$dir/package-lock.json"; then
    return 0
  fi
  say "installing Azurite (npm ci in tools/azurite) ..."
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2) || die "npm ci in tools/azurite failed"
  cp "$dir/package-lock.json" "$stamp"
}

# Installs cargo-nextest from crates.io when it is missing; returns non-zero if that fails.
ensure_nextest() {
  command -v cargo-nextest >/dev/null && return 0
  say "installing cargo-nextest ..."
  cargo install --locked cargo-nextest >&2
}
