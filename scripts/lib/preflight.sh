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
  local deps bad=0 f h k pkg i=0 jobs
  deps="$(mktemp)"
  jobs="$(nproc 2>/dev/null || echo 2)"
  # COMPILER -M on every source, nproc at a time; each writes its own .d and, on failure,
  # its own message, read back in the sources' order.
  for f in "$@"; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    ("$cc" $flags -M "$f" >"$deps.$i.d" 2>"$deps.$i.err" ||
      { echo "preflight: $cc -M $f failed:"; sed 's/^/  /' "$deps.$i.err" | head -20; } >"$deps.$i.fail") &
    if [ $((i % jobs)) = 0 ]; then wait; fi
  done
  wait
  for ((k = 1; k <= i; k++)); do
    cat "$deps.$k.d" >>"$deps" 2>/dev/null
    if [ -s "$deps.$k.fail" ]; then cat "$deps.$k.fail" >&2; bad=1; fi
    rm -f "$deps.$k.d" "$deps.$k.err" "$deps.$k.fail"
  done
  # The system headers (the copy, torch's and CUDA's headers and the venv are not), and the
  # package owning each: one dpkg -S for all of them (one call a header took ~0.1 s each,
  # about a minute a check).
  tr ' \\' '\n\n' <"$deps" | grep -E '^(/usr/include/|/usr/local/include/|/usr/lib/)' | sort -u >"$deps.sys"
  # dpkg -S prints "PACKAGE[:ARCH][, PACKAGE...]: PATH" per owned path (and "diversion ..."
  # lines); a path no package owns (CUDA toolkit under /usr/local) is only on stderr.
  xargs -r dpkg -S <"$deps.sys" 2>/dev/null |
    awk '!/^diversion / { i = index($0, ": /"); p = substr($0, i + 2); if (!(p in seen)) { seen[p] = 1; split($0, a, ":"); print p, a[1] } }' >"$deps.own"
  while read -r h pkg; do
    case " $_PREFLIGHT_TOOLCHAIN_PKGS " in *" $pkg "*) continue ;; esac
    case "$pkg" in *python3*-dev) continue ;; esac  # Python.h: the GPU machine's Python has its own
    case "$pkg" in
      *-dev | *-dev:*) echo "$pkg $h" >>"$deps.bad" ;;
    esac
  done <"$deps.own"
  if [ -s "$deps.bad" ]; then
    # One line per package: how many headers, and the first.
    sort "$deps.bad" | awk '{n[$1]++; if (!($1 in f)) f[$1]=$2} END {for (p in n) printf "preflight: %d header(s) from the Debian package %s, which the GPU machine lacks (e.g. %s)\n", n[p], p, f[p]}' >&2
    bad=1
  fi
  rm -f "$deps" "$deps.bad" "$deps.sys" "$deps.own"
  return $bad
}
