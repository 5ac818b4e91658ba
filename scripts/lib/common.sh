# Shared helpers for the scripts in this folder. Source it; it defines functions only.

# The repository root (the folder holding Cargo.toml).
repo_root() {
  cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd
}

say() { printf '%s\n' "$*" >&2; }

# The line that heads a measured or simulated table, and a blank line: the code it ran (CODE),
# when, on what machine, and COMMAND (already quoted as the caller wants it shown).
provenance_line() {
  printf 'Commit `%s`, %s, %s cores (%s). Command: %s.\n\n' "$1" \
    "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(nproc)" \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" "$2"
}
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

# Headless Chromium and its WebDriver, for the page's browser test
# (tools/devhost/tests/ui_browser.rs): Debian's chromium and chromium-driver, installed with
# apt-get when missing and this user may (root, or sudo without a password). Returns non-zero,
# with a message, when they cannot be installed; the test then says it was skipped and passes.
ensure_chromium() {
  if command -v chromedriver >/dev/null && { command -v chromium >/dev/null || command -v chromium-browser >/dev/null; }; then
    return 0
  fi
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      say "chromium and chromium-driver are missing and installing them needs root: the browser test will be skipped"
      return 1
    fi
  fi
  if ! command -v apt-get >/dev/null; then
    say "no apt-get to install chromium and chromium-driver: the browser test will be skipped"
    return 1
  fi
  say "installing chromium and chromium-driver (apt-get) for the browser test ..."
  local install=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium chromium-driver)
  if ! "${install[@]}" >&2; then
    # The package lists may be missing or old: read them once, and try again.
    "${sudo[@]}" apt-get update >&2 || true
    if ! "${install[@]}" >&2; then
      say "apt-get could not install chromium and chromium-driver: the browser test will be skipped"
      return 1
    fi
  fi
}

ensure_cargo_fuzz() {
  command -v cargo-fuzz >/dev/null && return 0
  say "installing cargo-fuzz ..."
  cargo install --locked cargo-fuzz >&2
}

# Assembles a function app folder: host.json, the handler binary and one folder per function,
# the layout the Functions host (and devhost) expects under its script root, plus
# local.settings.json for `func start` (the project's own, else the example) unless the third
# argument is --without-settings (a deployment package carries no local settings).
#   assemble_app DEST HANDLER_BINARY [--without-settings]
assemble_app() {
  local dest=$1 handler=$2 settings=${3:-} root
  root=$(repo_root)
  [ -x "$handler" ] || die "no handler binary at $handler"
  rm -rf "$dest"
  mkdir -p "$dest"
  cp "$root/host.json" "$dest/host.json"
  cp "$handler" "$dest/handler"
  chmod 755 "$dest/handler"
  local function
  for function in "$root"/function_app/*/; do
    [ -f "$function/function.json" ] || continue
    mkdir -p "$dest/$(basename "$function")"
    cp "$function/function.json" "$dest/$(basename "$function")/function.json"
  done
  if [ "$settings" = "--without-settings" ]; then
    return 0
  elif [ -f "$root/local.settings.json" ]; then
    cp "$root/local.settings.json" "$dest/local.settings.json"
  else
    cp "$root/local.settings.json.example" "$dest/local.settings.json"
  fi
}

# The cross-linking toolchain of scripts/package, pinned: zig from PyPI's `ziglang` wheel,
# installed into target/tools (no virtual environment needed), and cargo-zigbuild from
# crates.io. Exports CARGO_ZIGBUILD_ZIG_PATH.
ZIGLANG_VERSION=0.17.1
CARGO_ZIGBUILD_VERSION=0.24.1
ensure_zigbuild() {
  local root dir
  root=$(repo_root)
  dir="$root/target/tools/ziglang-$ZIGLANG_VERSION"
  if [ ! -x "$dir/ziglang/zig" ]; then
    command -v python3 >/dev/null || die "python3 is not installed (zig comes from PyPI's ziglang package)"
    say "installing zig (PyPI ziglang==$ZIGLANG_VERSION) into $dir ..."
    python3 -m pip install --quiet --disable-pip-version-check --target "$dir" "ziglang==$ZIGLANG_VERSION" >&2 \
      || die "pip could not install ziglang==$ZIGLANG_VERSION"
  fi
  export CARGO_ZIGBUILD_ZIG_PATH="$dir/ziglang/zig"
  if ! cargo zigbuild --version 2>/dev/null | grep -q "$CARGO_ZIGBUILD_VERSION"; then
    say "installing cargo-zigbuild $CARGO_ZIGBUILD_VERSION ..."
    cargo install --locked --version "$CARGO_ZIGBUILD_VERSION" cargo-zigbuild >&2 \
      || die "cargo install cargo-zigbuild failed"
  fi
}
