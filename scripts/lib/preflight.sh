# Shared by scripts/gpu_check.sh and scripts/gpu_eval.sh (sourced): the --preflight checks,
# run here on the CPU so that a GPU run (rare and short) cannot fail in its first minute.
#
# The GPU machine receives a copy of the work tree (tracked files and untracked files git
# does not ignore) plus the folders named in `carry` (.deps); nothing beside it, no Debian
# -dev packages and no internet. preflight_copy makes exactly that copy in a fresh folder
# with nothing beside it; preflight_headers fails on any header a build would take from
# a Debian -dev package other than the C/C++ toolchain's own.

# preflight_copy SRC_REPO -> prints the path of the copy (DEST/repo, DEST a new temp dir).
preflight_copy() {
  local src="$1" dest
  dest="$(mktemp -d /tmp/al-preflight.XXXXXX)"
  mkdir -p "$dest/repo"
  # --ignore-failed-read: a tracked file deleted in the work tree does not travel either.
  (cd "$src" && git ls-files -z --cached --others --exclude-standard |
    tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -xf - -C "$dest/repo"
  if [ -d "$src/.deps" ]; then cp -r "$src/.deps" "$dest/repo/.deps"; fi
  echo "$dest/repo"
}

# Packages whose headers the GPU machine has: the compilers' and the C library's.
_PREFLIGHT_TOOLCHAIN_PKGS="libc6-dev linux-libc-dev libstdc++-12-dev libgcc-12-dev libgomp1 gcc-12 g++-12 libcrypt-dev"

# preflight_headers COMPILER "FLAGS" SOURCE... : the headers each source includes (COMPILER -M);
# fails naming every header that comes from a Debian -dev package outside the toolchain.
preflight_headers() {
  local cc="$1" flags="$2"
  shift 2
  local deps bad=0 f h pkg
  deps="$(mktemp)"
  for f in "$@"; do
    # shellcheck disable=SC2086
    if ! "$cc" $flags -M "$f" >>"$deps" 2>"$deps.err"; then
      echo "preflight: $cc -M $f failed:" >&2
      sed 's/^/  /' "$deps.err" | head -20 >&2
      bad=1
    fi
  done
  for h in $(tr ' \\' '\n\n' <"$deps" | grep -E '^/' | sort -u); do
    case "$h" in
      /usr/include/* | /usr/local/include/* | /usr/lib/*) ;;
      *) continue ;;  # the copy, torch's and CUDA's headers, the venv
    esac
    pkg="$(dpkg -S "$h" 2>/dev/null | head -1 | cut -d: -f1)"
    [ -n "$pkg" ] || continue  # not from a Debian package (CUDA toolkit under /usr/local)
    case " $_PREFLIGHT_TOOLCHAIN_PKGS " in *" $pkg "*) continue ;; esac
    case "$pkg" in *python3*-dev) continue ;; esac  # Python.h: the GPU machine's Python has its own
    case "$pkg" in
      *-dev | *-dev:*) echo "$pkg $h" >>"$deps.bad" ;;
    esac
  done
  if [ -s "$deps.bad" ]; then
    # One line per package: how many headers, and the first.
    sort "$deps.bad" | awk '{n[$1]++; if (!($1 in f)) f[$1]=$2} END {for (p in n) printf "preflight: %d header(s) from the Debian package %s, which the GPU machine lacks (e.g. %s)\n", n[p], p, f[p]}' >&2
    bad=1
  fi
  rm -f "$deps" "$deps.err" "$deps.bad"
  return $bad
}
