#!/usr/bin/env bash
# Runs the code blocks of README.md and docs/*.md as a reader pastes them, twice each.
#
# The convention: a fenced block whose info string carries a file name,
#   ```rust title=src/main.rs     ```python title=quickstart.py
#   ```js title=quickstart.mjs    ```sh title=setup.sh
# is a whole program, saved under that name and run; a block without `title=` is
# illustrative (a fragment, a shell session, a table's DDL) and only counted. Each
# runnable block runs twice in one fresh directory (the second run meets what the first
# left: a SQLite file, a tag, worker-id lock files), as the user nobody (65534) with a
# HOME of its own when this script runs as root, and with a private /tmp (a mount
# namespace), so a program's `/tmp/leafid-workers` is its own and never one another run
# or user left behind.
#   rust    a fresh `cargo new` project (edition 2024, as cargo makes it today) gets the
#           `cargo add` lines of README.md's sh blocks and of the page's own before the
#           block, with `cargo add leafid` pointed at this checkout (`cargo add --path
#           core`) and the rest (tokio) from crates.io; built with the workspace's
#           Cargo.lock and CARGO_TARGET_DIR, so the dependencies compile once (the first
#           run compiles them for the app's feature set). cargo builds as the invoking
#           user (the shared target directory is theirs); the program runs as nobody.
#   python  a venv of the newest /usr/bin/python3.N with the wheel LEAFID_WHEEL, else the
#           one in dist/ (scripts/dist.sh), else `pip install .`.
#   js      a fresh npm project with the tarballs of dist/ (scripts/build-npm.sh), else
#           this checkout's package files copied as node_modules/leafid (its native
#           module from NAPI_RS_NATIVE_LIBRARY_PATH or `npm run build`).
#   sh      bash.
# mypy --strict and tsc --strict check the same extracted blocks in the Python and Node
# suites (tests/python/test_readme.py, tests/node/readme.test.js).
#
#   scripts/test-docs.sh              # every page
#   scripts/test-docs.sh README.md    # some pages
#   LEAFID_DOCS_ONLY=python ...       # one language (rust, python, js, sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
dist=${LEAFID_DIST_DIR:-$root/dist}
only=${LEAFID_DOCS_ONLY:-}
if [ $# -gt 0 ]; then pages=("$@"); else pages=(README.md docs/*.md); fi

# Outside /tmp: the programs get a private /tmp mounted over it.
work=$(mktemp -d -p /var/tmp leafid-docs.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"

# One directory per runnable block: lang, title, origin (page:line), code, and for rust
# the page's `cargo add` lines before it.
/usr/bin/python3 - "$work/blocks" "${pages[@]}" <<'PY'
import os, re, sys
out, pages = sys.argv[1], sys.argv[2:]
fence = re.compile(r"^```(\S*)\s*(.*)$")
n = illustrative = 0
# A page's Rust programs build with the README's `cargo add` lines (the quick start's
# project) plus any of its own before them.
def cargo_adds(lines):
    adds = []
    for l in lines:
        l = l.split("#")[0].strip()  # a trailing comment
        if l.startswith("cargo add ") and l not in adds:
            adds.append(l)
    return adds
readme = cargo_adds(open("README.md", encoding="utf-8").read().split("\n")) if os.path.exists("README.md") else []
for page in pages:
    lines = open(page, encoding="utf-8").read().split("\n")
    adds, i = ([] if page == "README.md" else list(readme)), 0
    while i < len(lines):
        m = fence.match(lines[i])
        if not m or not m.group(1):
            if m and not m.group(1):
                sys.exit(f"{page}:{i + 1}: a code block without a language; tag it (text, sh, …)")
            i += 1
            continue
        lang, info, start = m.group(1), m.group(2), i + 1
        j = start
        while j < len(lines) and lines[j] != "```":
            j += 1
        if j == len(lines):
            sys.exit(f"{page}:{start}: unclosed code block")
        body = lines[start:j]
        if lang == "sh":
            adds += [l for l in cargo_adds(body) if l not in adds]
        title = re.search(r"\btitle=(\S+)", info)
        if title:
            if lang not in ("rust", "python", "js", "sh"):
                sys.exit(f"{page}:{start}: title= on a {lang} block; runnable blocks are rust, python, js, sh")
            n += 1
            d = os.path.join(out, f"{n:02d}")
            os.makedirs(d)
            for name, text in (("lang", lang), ("title", title.group(1)),
                               ("origin", f"{page}:{start}"), ("code", "\n".join(body) + "\n"),
                               ("deps", "\n".join(adds) + "\n")):
                with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                    f.write(text)
        else:
            illustrative += 1
        i = j + 1
# Relative links point at files that exist (anchors are not checked).
for page in pages:
    text = open(page, encoding="utf-8").read()
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" not in target and not os.path.exists(os.path.join(os.path.dirname(page), target)):
            sys.exit(f"{page}: a link to {target}, which does not exist")
print(f"docs: {n} runnable blocks, {illustrative} illustrative (no title=) in {len(pages)} pages")
PY

as_nobody=0
if [ "$(id -u)" -eq 0 ]; then
    # A container without CAP_SYS_ADMIN has no mount namespaces: then the programs run
    # as root, in the shared /tmp (said in the closing line).
    if unshare --mount --propagation private true 2>/dev/null && command -v setpriv >/dev/null; then
        as_nobody=1
    else
        echo "docs: no mount namespace or setpriv here: the programs run as root, in the shared /tmp"
    fi
fi

# run DIR TMP CMD...: CMD in DIR, with TMP as /tmp; as nobody (HOME=DIR/../home) when root.
run() {
    local dir=$1 tmp=$2
    shift 2
    if [ "$as_nobody" -eq 1 ]; then
        unshare --mount --propagation private -- /bin/sh -c \
            'mount --bind "$1" /tmp && cd "$2" && shift 2 && exec "$@"' sh "$tmp" "$dir" \
            setpriv --reuid=65534 --regid=65534 --clear-groups \
            env -i "PATH=$PATH" "HOME=$dir/../home" LANG=C.UTF-8 \
            ${NAPI_RS_NATIVE_LIBRARY_PATH:+"NAPI_RS_NATIVE_LIBRARY_PATH=$NAPI_RS_NATIVE_LIBRARY_PATH"} "$@"
    else
        (cd "$dir" && "$@")
    fi
}

# A fresh directory for one block: run/ (the working directory), home/, tmp/ (1777).
fresh() {
    local base=$1
    mkdir -p "$base/run" "$base/home" "$base/tmp"
    chmod 1777 "$base/tmp"
    chmod 755 "$base"
    if [ "$as_nobody" -eq 1 ]; then chown 65534:65534 "$base/run" "$base/home"; fi
}

failures=0
ran=0
# twice BLOCK LABEL CMD...: the block's program, twice in one fresh directory.
twice() {
    local b=$1 label=$2
    shift 2
    local base=$b/x
    fresh "$base"
    local title
    title=$(cat "$b/title")
    mkdir -p "$(dirname "$base/run/$title")"
    cp "$b/code" "$base/run/$title"
    if [ "$as_nobody" -eq 1 ]; then chown -R 65534:65534 "$base/run"; fi
    local k
    for k in 1 2; do
        if ! run "$base/run" "$base/tmp" "$@" >"$b/out.$k" 2>&1; then
            echo "FAILED: $(cat "$b/origin") ($label, run $k):"
            sed 's/^/    /' "$b/out.$k"
            failures=$((failures + 1))
            return
        fi
    done
    echo "ok: $(cat "$b/origin") $title ($label, twice)"
    for k in 1 2; do head -c 2000 "$b/out.$k" | head -4 | sed "s/^/    run $k: /"; done
    ran=$((ran + 1))
}

blocks=()
for b in "$work"/blocks/*; do
    [ -d "$b" ] || continue
    [ -z "$only" ] || [ "$(cat "$b/lang")" = "$only" ] || continue
    blocks+=("$b")
done
has() { local b; for b in "${blocks[@]}"; do [ "$(cat "$b/lang")" = "$1" ] && return 0; done; return 1; }

# Python: a fresh venv in the work directory (which nobody can reach, wherever the
# checkout is).
if has python; then
    py=$(ls /usr/bin/python3.[0-9]* 2>/dev/null | grep -E '/python3\.[0-9]+$' | sort -V | tail -1)
    venv=$work/venv
    "$py" -m venv "$venv"
    pkg=${LEAFID_WHEEL:-$(ls "$dist"/leafid-*-manylinux*.whl 2>/dev/null | head -1 || true)}
    "$venv/bin/pip" install -q --force-reinstall --no-deps "${pkg:-.}"
    echo "docs: python $("$venv/bin/python" -V 2>&1 | cut -d' ' -f2), leafid from ${pkg:-. (pip install .)}"
    for b in "${blocks[@]}"; do
        [ "$(cat "$b/lang")" = python ] || continue
        twice "$b" python "$venv/bin/python" "$(cat "$b/title")"
    done
fi

# Node: one project with leafid as a user installs it.
if has js; then
    proj=$work/node
    mkdir -p "$proj"
    echo '{ "name": "leafid-docs", "private": true }' >"$proj/package.json"
    version=$(node -p "require('$root/package.json').version")
    main=$dist/leafid-$version.tgz
    platform=$dist/leafid-linux-x64-gnu-$version.tgz
    if [ -f "$main" ] && [ -f "$platform" ]; then
        (cd "$proj" && npm install --offline --no-audit --no-fund --loglevel=error "$platform" "$main")
        unset NAPI_RS_NATIVE_LIBRARY_PATH  # the installed platform package's binary
        echo "docs: node $(node -v), leafid from $main"
    else
        if [ -z "${NAPI_RS_NATIVE_LIBRARY_PATH:-}" ] && ! ls bindings-node/*.node >/dev/null 2>&1; then
            npm install --no-audit --no-fund --loglevel=error && npm run build
        fi
        # The package's files (as `files` in package.json lists them), copied: nobody may
        # not reach the checkout. The native module beside them, or where the loader
        # override points.
        pkg=$proj/node_modules/leafid
        mkdir -p "$pkg/bindings-node"
        cp package.json "$pkg/"
        cp bindings-node/index.js bindings-node/index.mjs bindings-node/index.d.ts \
            bindings-node/index.d.mts bindings-node/binding.js "$pkg/bindings-node/"
        if [ -n "${NAPI_RS_NATIVE_LIBRARY_PATH:-}" ]; then
            cp "$NAPI_RS_NATIVE_LIBRARY_PATH" "$work/leafid.node"
            export NAPI_RS_NATIVE_LIBRARY_PATH=$work/leafid.node
        else
            cp bindings-node/*.node "$pkg/bindings-node/"
        fi
        echo "docs: node $(node -v), leafid from this checkout"
    fi
    chmod -R a+rX "$proj"
    for b in "${blocks[@]}"; do
        [ "$(cat "$b/lang")" = js ] || continue
        # The program sits in the project, as a user's file does; its cwd is a fresh dir.
        cp "$b/code" "$proj/$(basename "$(cat "$b/title")")"
        chmod 644 "$proj/$(basename "$(cat "$b/title")")"
        twice "$b" node node "$proj/$(basename "$(cat "$b/title")")"
    done
fi

# Rust: a cargo new project per block, the page's dependency lines.
if has rust; then
    for b in "${blocks[@]}"; do
        [ "$(cat "$b/lang")" = rust ] || continue
        app=$b/app
        cargo new -q --vcs none --name app "$app"
        grep -q '^edition = "2024"' "$app/Cargo.toml" ||
            { echo "cargo new made no edition-2024 project: $(grep edition "$app/Cargo.toml")"; exit 1; }
        cp Cargo.lock "$app/"  # the workspace's versions, so its compiled crates are reused
        while read -r line; do
            [ -n "$line" ] || continue
            # shellcheck disable=SC2086
            set -- ${line#cargo add }
            if [ "$1" = leafid ]; then shift; set -- --path "$root/core" "$@"; fi
            # Offline (the crates cargo has cached) when crates.io cannot be reached.
            (cd "$app" && { cargo add -q "$@" 2>/dev/null || cargo add -q --offline "$@"; })
        done <"$b/deps"
        cp "$b/code" "$app/$(cat "$b/title")"
        if ! (cd "$app" && cargo build -q 2>"$b/build.err"); then
            echo "FAILED: $(cat "$b/origin") does not build in a cargo new project:"
            sed 's/^/    /' "$b/build.err"
            failures=$((failures + 1))
            continue
        fi
        cp "$CARGO_TARGET_DIR/debug/app" "$b/app.bin"
        chmod 755 "$b" "$b/app.bin"
        twice "$b" "rust, edition 2024" "$b/app.bin"
    done
fi

if has sh; then
    for b in "${blocks[@]}"; do
        [ "$(cat "$b/lang")" = sh ] || continue
        twice "$b" sh bash "$(cat "$b/title")"
    done
fi

how=" as $(id -un)"
[ "$as_nobody" -eq 1 ] && how=" as nobody with a private /tmp"
echo "docs: $ran blocks ran twice$how, $failures failed"
[ "$failures" -eq 0 ]
