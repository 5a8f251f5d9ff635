# shellcheck shell=bash
# dtrain.bash - bash completion for dtrain(1) and dtraind(8).
#
# Installed by `make install` as $(PREFIX)/share/bash-completion/completions/dtrain (and dtraind,
# a link to it), where bash-completion loads it the first time either command is completed. To
# try it from the source tree: `source config/completion/dtrain.bash`.
#
# It completes the verbs, the sub-commands of bench and data, each verb's options and the values
# of the options that take a fixed set (--policy, --format, --wire, ...), and file names where a
# file goes: JOB.json and MODEL.json (*.json), data files, -o/--output, --token-file and the TLS
# files. Job ids are not completed (that would take a call to the chief per TAB).
# test/integration/docs_man_completion.sh keeps these lists equal to what `dtrain VERB --help`
# prints; add an option there and here together.

# Verbs, in `dtrain --help`'s order, plus top.
_dtrain_verbs="bench cluster data summary submit jobs status watch top cancel resume rm export
  evaluate predict help"

# Taken before the verb (and the connection ones after it too).
_dtrain_global_opts="--addr --token-file --tls-ca --tls-cert --tls-key --timeout --json --help
  --version"
_dtrain_conn_opts="--addr --token-file --tls-ca --tls-cert --tls-key --help"

# _dtrain_verb_opts VERB [SUB]: the options VERB (SUB of bench and data) takes, besides
# _dtrain_conn_opts. Without SUB, bench and data give every option of their sub-commands.
_dtrain_verb_opts() {
  local common="--json --timeout"
  case $1 in
  cluster | jobs | status | cancel | rm) echo "$common" ;;
  summary) echo "--json" ;;
  submit | resume) echo "--watch $common" ;;
  watch) echo "--json" ;;
  top) echo "--interval --once --timeout" ;;
  export) echo "-o --output --checkpoint $common" ;;
  evaluate) echo "--data --batch $common" ;;
  predict) echo "--data --batch -o --output --format $common" ;;
  data)
    local inspect="--json --label --replicas --policy --batch --threads"
    local bench="--json --batch --epochs --prefetch --replicas --rank --shuffle --work-us"
    case ${2:-} in
    inspect) echo "$inspect" ;;
    bench) echo "$bench" ;;
    *) echo "$inspect $bench" ;;
    esac
    ;;
  bench)
    local train="--model --batch --threads --steps --warmup --json --workers --data --optimizer
      --timeout --compression --bucket-mb --first-bucket-mb --devices --device --tf32"
    local allreduce="--sizes --iters --warmup --warmup-s --wire --streams --chunk --verify
      --no-stream --devices --timeout --json"
    local data="--threads --batch --repeat --json"
    case ${2:-} in
    train) echo "$train" ;;
    allreduce) echo "$allreduce" ;;
    data) echo "$data" ;;
    *) echo "$train $allreduce $data" ;;
    esac
    ;;
  esac
}

# Options followed by a value (the value is not a verb or a positional argument).
_dtrain_takes_value() {
  case $1 in
  --addr | --token-file | --tls-ca | --tls-cert | --tls-key | --timeout | --interval | -o | \
    --output | --data | --batch | --format | --label | --replicas | --policy | --epochs | \
    --prefetch | --rank | --work-us | --model | --threads | --steps | --warmup | --workers | \
    --optimizer | --compression | --bucket-mb | --first-bucket-mb | --sizes | --iters | \
    --warmup-s | --wire | --streams | --chunk | --devices | --device | --repeat)
    return 0
    ;;
  esac
  return 1
}

# _dtrain_files [EXT]: file names (only *.EXT, and directories, with EXT).
_dtrain_files() {
  if declare -F _filedir >/dev/null; then
    _filedir "$@"
    return
  fi
  local IFS=$'\n'
  if [[ ${1:-} == -d ]]; then
    # shellcheck disable=SC2207
    COMPREPLY=($(compgen -d -- "$cur"))
  elif [[ -n ${1:-} ]]; then
    # shellcheck disable=SC2207
    COMPREPLY=($(compgen -d -- "$cur") $(compgen -f -X "!*.$1" -- "$cur"))
  else
    # shellcheck disable=SC2207
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}

_dtrain_words() {
  # shellcheck disable=SC2207
  COMPREPLY=($(compgen -W "$1" -- "$cur"))
}

# The value of option PREV; returns 1 when PREV takes no value.
_dtrain_value() {
  case $1 in
  --token-file | --tls-ca | --tls-cert | --tls-key | -o | --output) _dtrain_files ;;
  --model) _dtrain_files json ;;
  --data)
    # A data split: inline JSON or a file holding it.
    [[ $cur == "{"* ]] || _dtrain_files
    ;;
  --format) _dtrain_words "csv npy" ;;
  --policy) _dtrain_words "AUTO FILE DATA OFF" ;;
  --wire) _dtrain_words "f32 bf16 f16" ;;
  --compression) _dtrain_words "none bf16 f16" ;;
  --optimizer) _dtrain_words "sgd adam adamw rmsprop" ;;
  --sizes) _dtrain_words "4K,64K,1M,4M,16M,64M" ;;
  *) _dtrain_takes_value "$1" || return 1 ;; # a number or an address: nothing to offer
  esac
  return 0
}

_dtrain() {
  local cur prev words cword split=false
  if declare -F _init_completion >/dev/null; then
    _init_completion -s -n : || return
  else
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD - 1]}
    words=("${COMP_WORDS[@]}")
    cword=$COMP_CWORD
  fi

  # The verb and the sub-command: the first words that are neither options nor their values.
  local i w verb="" sub="" skip=false
  for ((i = 1; i < cword; i++)); do
    w=${words[i]}
    if $skip; then
      skip=false
      continue
    fi
    if [[ $w == -* ]]; then
      [[ $w != *=* ]] && _dtrain_takes_value "$w" && skip=true
      continue
    fi
    if [[ -z $verb ]]; then
      verb=$w
    elif [[ -z $sub ]]; then
      sub=$w
    fi
  done

  _dtrain_value "$prev" && return
  $split && return

  if [[ -z $verb ]]; then
    if [[ $cur == -* ]]; then
      _dtrain_words "$_dtrain_global_opts"
    else
      _dtrain_words "$_dtrain_verbs"
    fi
    return
  fi

  if [[ $cur == -* ]]; then
    _dtrain_words "$(_dtrain_verb_opts "$verb" "$sub") $_dtrain_conn_opts"
    return
  fi

  # Positional arguments.
  case $verb in
  help) [[ -z $sub ]] && _dtrain_words "$_dtrain_verbs" ;;
  submit | summary) [[ -z $sub ]] && _dtrain_files json ;;
  bench)
    if [[ -z $sub ]]; then
      _dtrain_words "train allreduce data"
    elif [[ $sub == data ]]; then
      _dtrain_files json
    fi
    ;;
  data)
    if [[ -z $sub ]]; then
      _dtrain_words "inspect bench"
    else
      _dtrain_files
    fi
    ;;
  esac
}

_dtraind_opts="--tf-config --listen --token-file --insecure --tls-cert --tls-key --tls-ca
  --rendezvous-timeout --state-dir --data-root --ready-file --threads --eval-interval --keep-jobs
  --max-job-memory --log-level --check --json --version --help"

_dtraind() {
  local cur prev words cword split=false
  if declare -F _init_completion >/dev/null; then
    _init_completion -s -n : || return
  else
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD - 1]}
  fi
  case $prev in
  --tf-config) _dtrain_files json; return ;;
  --token-file | --tls-cert | --tls-key | --tls-ca | --ready-file) _dtrain_files; return ;;
  --state-dir | --data-root) _dtrain_files -d; return ;;
  --log-level) _dtrain_words "error warn info debug trace"; return ;;
  --max-job-memory) _dtrain_words "none"; return ;;
  --listen | --rendezvous-timeout | --threads | --eval-interval | --keep-jobs) return ;;
  esac
  $split && return
  _dtrain_words "$_dtraind_opts"
}

complete -F _dtrain dtrain
complete -F _dtraind dtraind
