# Helpers the scripts source (`. scripts/lib.sh`); they run nothing on their
# own.

# Installs Debian packages with apt (sudo when not root). Output goes to
# stderr, so a script whose stdout is a report stays clean.
apt_install() {
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >&2
}

# The path of LLVM tool $1 (llvm-size, llvm-nm, llvm-objdump, ...) matching
# rustc's LLVM (rustup's llvm-tools, added on first use), else one on PATH;
# exits naming what is missing.
llvm_tool() {
    local bin
    bin="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin"
    [ -x "$bin/$1" ] || rustup component add llvm-tools >/dev/null 2>&1 || true
    if [ -x "$bin/$1" ]; then
        echo "$bin/$1"
    elif command -v "$1" >/dev/null; then
        command -v "$1"
    else
        echo "$1 not found (rustup component add llvm-tools)" >&2
        exit 1
    fi
}
