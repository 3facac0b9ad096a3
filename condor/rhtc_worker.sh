#!/bin/sh
# rhtc_worker.sh -- the executable of one redis-htcondor worker job (HTCondor or Slurm).
#
# It finds a Python that can run the worker, names the worker after its job and
# runs `python -m rhtc.worker --config FILE --name NAME` until the batch system sends
# SIGTERM (condor_rm, scancel, the end of the job's time), which it passes on.
#
#   rhtc_worker.sh [--config FILE] [--env TARBALL [--env-cache DIR] | --python PYTHON]
#                  [--cache-size SIZE] [-- EXTRA WORKER ARGS]
#                  (any other option goes to the worker as is, e.g. --disk-cache DIR)
#
#   --config FILE    broker config (JSON: url, key, namespace; mode 0600).  Default:
#                    broker.json in the current directory if it is there (HTCondor
#                    transfers it), else $RHTC_CONFIG, else ~/.config/rhtc/broker.json.
#   --env TARBALL    a worker environment made by `rhtc pack` (wheels of the worker's
#                    dependencies installed for the node's Python, plus this project's
#                    sources).  It is unpacked once per node (see --env-cache).
#   --env-cache DIR  where the node's workers share the unpacked environments (default
#                    $RHTC_ENV_CACHE, else /tmp/rhtc-envs-<uid>; a directory of the user's,
#                    0700). The first worker of a node unpacks a tarball there; the next
#                    ones start without unpacking (each unpack is ~130 MB written and 1-2 s
#                    of CPU). A job holds a shared lock on the environment it runs; one that
#                    no job holds is removed by the next job that starts, so the directory
#                    keeps what runs and the newest. `none`: unpack into the job's scratch.
#   --python PYTHON  a Python that already has the project installed (shared filesystem,
#                    CVMFS, container image).  Also $RHTC_PYTHON.
#   --cache-size S   the worker's branch cache cap, e.g. 2GB (default: half the job's
#                    RequestMemory under HTCondor).
#   --token-file F   a bearer token transferred with the job: made 0600 and given to the
#                    worker's root:// reads as BEARER_TOKEN_FILE.  A grid proxy needs
#                    nothing here: HTCondor sets X509_USER_PROXY (use_x509userproxy).
#
# Nothing secret is passed on the command line or in the environment: the broker URL and
# the signing key stay in the 0600 config file.
set -u

log() { echo "rhtc_worker: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

config=""
env_pack=""
env_cache="${RHTC_ENV_CACHE:-/tmp/rhtc-envs-$(id -u)}"
python="${RHTC_PYTHON:-}"
cache_size=""
token_file=""
while [ $# -gt 0 ]; do
    case "$1" in
        --token-file) token_file=$2; shift 2 ;;
        --config) config=$2; shift 2 ;;
        --env) env_pack=$2; shift 2 ;;
        --env-cache) env_cache=$2; shift 2 ;;
        --python) python=$2; shift 2 ;;
        --cache-size) cache_size=$2; shift 2 ;;
        --) shift; break ;;
        *) break ;;
    esac
done

# --- the broker config -----------------------------------------------------------
if [ -z "$config" ]; then
    if [ -f broker.json ]; then config=broker.json
    elif [ -n "${RHTC_CONFIG:-}" ]; then config=$RHTC_CONFIG
    else config="$HOME/.config/rhtc/broker.json"
    fi
fi
[ -f "$config" ] || die "no broker config at '$config': transfer it with the job (transfer_input_files) or put it on a shared path and pass --config"
# A transferred copy may have lost its mode; the worker refuses a config others can read.
[ -O "$config" ] && chmod 600 "$config"

# --- the data credentials: only the owner may read them ------------------------------
if [ -n "$token_file" ]; then
    [ -f "$token_file" ] || die "the bearer token '$token_file' did not reach the job: check bearer_token= in the submit file"
    chmod 600 "$token_file"
    BEARER_TOKEN_FILE="$(cd "$(dirname "$token_file")" && pwd)/$(basename "$token_file")"
    export BEARER_TOKEN_FILE
fi
if [ -n "${X509_USER_PROXY:-}" ] && [ -f "$X509_USER_PROXY" ] && [ -O "$X509_USER_PROXY" ]; then
    chmod 600 "$X509_USER_PROXY"
fi

# --- the worker's name: which job is which in `rhtc status` ------------------------
host=$(hostname 2>/dev/null || uname -n)
job=""
if [ -n "${_CONDOR_JOB_AD:-}" ] && [ -r "${_CONDOR_JOB_AD}" ]; then
    cluster=$(sed -n 's/^ClusterId = //p' "$_CONDOR_JOB_AD" | head -n 1)
    proc=$(sed -n 's/^ProcId = //p' "$_CONDOR_JOB_AD" | head -n 1)
    [ -n "$cluster" ] && job="condor-$cluster.$proc"
fi
if [ -z "$job" ] && [ -n "${RHTC_CONDOR_JOB:-}" ]; then
    job="condor-$RHTC_CONDOR_JOB"
fi
if [ -z "$job" ] && [ -n "${SLURM_ARRAY_JOB_ID:-}" ]; then
    job="slurm-${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
elif [ -z "$job" ] && [ -n "${SLURM_JOB_ID:-}" ]; then
    job="slurm-$SLURM_JOB_ID"
fi
[ -n "$job" ] || job="job-$$"
name="$job@$host"

# --- the worker's Python -----------------------------------------------------------
# The node's shared copy of the environment (see --env-cache): sets envdir and returns 0,
# or returns 1 (nothing shared: the caller unpacks into the job's scratch).
shared_env() {
    [ "$env_cache" = none ] && return 1
    for tool in flock sha256sum; do
        command -v "$tool" >/dev/null 2>&1 || { log "no $tool on $host: the environment is unpacked for this job alone"; return 1; }
    done
    (umask 077 && mkdir -p "$env_cache") 2>/dev/null
    if [ -L "$env_cache" ] || [ ! -d "$env_cache" ] || [ ! -O "$env_cache" ]; then
        log "$env_cache is not a directory of $(id -un 2>/dev/null || id -u): the environment is unpacked for this job alone (set --env-cache)"
        return 1
    fi
    chmod 700 "$env_cache" || return 1
    key=$(sha256sum < "$env_pack" | cut -c1-16) || return 1
    exec 8>"$env_cache/.lock" || return 1
    flock 8                                      # one job of the node unpacks or removes at a time
    envdir="$env_cache/$key"
    if [ -f "$envdir/.unpacked" ]; then
        log "using the environment unpacked on this node by an earlier worker ($envdir)"
    else
        rm -rf "$envdir"                         # what a job killed while unpacking left
        mkdir -p "$envdir" && tar -xzf "$env_pack" -C "$envdir" || die "cannot unpack $env_pack into $envdir"
        : > "$envdir/.unpacked"
        log "unpacked $env_pack into $envdir (this node's next workers use it)"
    fi
    exec 9<"$envdir/.unpacked"
    flock -s 9                                   # held while this job runs (the worker inherits it)
    for other in "$env_cache"/*; do              # what no running job holds is removed
        [ -d "$other" ] && [ "$other" != "$envdir" ] || continue
        if [ ! -f "$other/.unpacked" ] || flock -xn "$other/.unpacked" true; then
            rm -rf "$other" && log "removed $other: no worker of this node runs it"
        fi
    done
    flock -u 8
    exec 8>&-
}

cleanup_dir=""
if [ -n "$env_pack" ]; then
    [ -f "$env_pack" ] || die "worker environment '$env_pack' not found (make it with \`rhtc pack\`)"
    if shared_env; then
        :
    elif [ -n "${_CONDOR_SCRATCH_DIR:-}" ]; then
        envdir="$_CONDOR_SCRATCH_DIR/rhtc-env"          # HTCondor removes it after the job
        mkdir -p "$envdir" && tar -xzf "$env_pack" -C "$envdir" || die "cannot unpack $env_pack into $envdir"
    else
        envdir=$(mktemp -d "${SLURM_TMPDIR:-${TMPDIR:-/tmp}}/rhtc-env.XXXXXX") || die "cannot make a scratch directory"
        cleanup_dir=$envdir
        tar -xzf "$env_pack" -C "$envdir" || die "cannot unpack $env_pack into $envdir"
    fi
    [ -f "$envdir/manifest.json" ] || die "cannot unpack a worker environment from $env_pack: it holds no manifest.json (not made by \`rhtc pack\`, or damaged)"
    want=$(sed -n 's/.*"python": *"\([0-9.]*\)".*/\1/p' "$envdir/manifest.json" | head -n 1)
    if [ -z "$python" ]; then
        for candidate in "python$want" python3 python; do
            if command -v "$candidate" >/dev/null 2>&1; then
                have=$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
                if [ "$have" = "$want" ]; then python=$(command -v "$candidate"); break; fi
            fi
        done
        [ -n "$python" ] || die "the worker environment was packed for Python $want but this node ($host) has no python$want on PATH; repack with \`rhtc pack --python-version X.Y\` for the node's python3, or pass --python"
    fi
    PYTHONPATH="$envdir/src:$envdir/site${PYTHONPATH:+:$PYTHONPATH}"
    export PYTHONPATH
else
    [ -n "$python" ] || python=python3
    command -v "$python" >/dev/null 2>&1 || die "no '$python' on this node: pass --env (a \`rhtc pack\` tarball) or --python"
fi
# unbuffered logs in the job's stderr, and a Python traceback should the worker crash
PYTHONUNBUFFERED=1
PYTHONFAULTHANDLER=1
export PYTHONUNBUFFERED PYTHONFAULTHANDLER
"$python" -c 'import rhtc.worker' 2>/dev/null || die "$python cannot import the worker (PYTHONPATH=${PYTHONPATH:-}): install the project there, or use --env with a \`rhtc pack\` tarball"

log "starting worker $name with $python ($("$python" -V 2>&1))"

# --- run until SIGTERM, which is passed on to the worker ---------------------------
child=""
forward() { [ -n "$child" ] && kill -TERM "$child" 2>/dev/null; }
trap forward TERM INT HUP
if [ -n "$cache_size" ]; then
    "$python" -m rhtc.worker --config "$config" --name "$name" --cache-size "$cache_size" "$@" &
else
    "$python" -m rhtc.worker --config "$config" --name "$name" "$@" &
fi
child=$!
while :; do
    wait "$child"
    status=$?
    kill -0 "$child" 2>/dev/null || break   # wait was interrupted by a signal: wait again
done
[ -n "$cleanup_dir" ] && rm -rf "$cleanup_dir"
log "worker $name exited with status $status"
exit "$status"
