# Shell functions shared by deploy/pg.sh and deploy/ha.sh (sourced, never run): which
# PostgreSQL to use, which user runs it, and where its directory lives. The caller defines
# log() and die() and sets DIR (an absolute path) before calling prepare_dir / locate_dir.
#
# As root: PostgreSQL refuses to run as root, so the server runs as the `postgres` user
# (created by the postgresql package; a system user `omnigate-pg` is created if it is
# missing) and DIR is owned by it. If that user cannot reach DIR (a clone under /root, whose
# mode is 0700), no permission is loosened: the data lives in /var/lib/omnigate/pg-<hash
# of DIR> and DIR becomes a symlink to it.

# The newest installed server, unless DIR already holds a cluster of another major version.
bindir_for() {
  local want=${1:-} d
  if [[ -n "$want" ]]; then
    d=/usr/lib/postgresql/$want/bin
    [[ -x "$d/postgres" ]] || die "the cluster in $DIR is PostgreSQL $want, but $d/postgres is not installed"
    echo "$d"
    return
  fi
  local best=-1 v
  d=
  for v in /usr/lib/postgresql/*/bin/postgres; do
    v=${v#/usr/lib/postgresql/}
    v=${v%%/*}
    if [[ "$v" =~ ^[0-9]+$ && "$v" -gt "$best" ]]; then
      best=$v
      d=/usr/lib/postgresql/$v/bin
    fi
  done
  [[ -n "$d" && -x "$d/postgres" ]] ||
    die "no PostgreSQL server under /usr/lib/postgresql (run: bash deploy/install-deps.sh)"
  echo "$d"
}

# --- who runs the server -------------------------------------------------------------------
SERVER_USER=
AS=()
if [[ $(id -u) -eq 0 ]]; then
  SERVER_USER=postgres
  if ! id -u "$SERVER_USER" >/dev/null 2>&1; then
    SERVER_USER=omnigate-pg
    if ! id -u "$SERVER_USER" >/dev/null 2>&1; then
      log "creating system user $SERVER_USER to run PostgreSQL (it refuses to run as root)"
      useradd -r -M -d /nonexistent -s /usr/sbin/nologin "$SERVER_USER"
    fi
  fi
  AS=(runuser -u "$SERVER_USER" --)
fi

# Runs a command as the server's user from a directory that user can enter.
as_pg() { (cd / && "${AS[@]}" "$@"); }

# Clean client environment: no PG* variable of the caller may redirect our commands.
for v in $(compgen -e | grep '^PG' || true); do unset "$v"; done
export PGCLIENTENCODING=UTF8

# --- locating DIR -----------------------------------------------------------------------------
# start: creates DIR (or the symlinked relocation) and makes it the server user's.
prepare_dir() {
  if [[ -L "$DIR" || -d "$DIR" ]]; then
    DIR=$(readlink -f "$DIR")
  else
    mkdir -p "$DIR"
    DIR=$(readlink -f "$DIR")
    if [[ -n "$SERVER_USER" ]] && ! runuser -u "$SERVER_USER" -- test -x "$DIR" 2>/dev/null; then
      # A parent of DIR is not traversable by the server user (e.g. /root is 0700).
      local real
      real=/var/lib/omnigate/pg-$(printf '%s' "$DIR" | sha256sum | cut -c1-12)
      log "$SERVER_USER cannot reach $DIR (a parent directory is private);" \
          "keeping the cluster in $real with $DIR a symlink to it"
      rmdir "$DIR"
      mkdir -p "$real"
      chmod 0755 /var/lib/omnigate
      ln -s "$real" "$DIR"
      DIR=$real
    fi
  fi
  if [[ -n "$SERVER_USER" ]]; then
    runuser -u "$SERVER_USER" -- test -x "$DIR" 2>/dev/null ||
      die "$SERVER_USER cannot reach $DIR; move it or remove it so it can be relocated"
    chown "$SERVER_USER" "$DIR"
  fi
  chmod 0700 "$DIR"
}

# stop/status: never create anything.
locate_dir() {
  if [[ -L "$DIR" || -d "$DIR" ]]; then
    DIR=$(readlink -f "$DIR")
  fi
}
