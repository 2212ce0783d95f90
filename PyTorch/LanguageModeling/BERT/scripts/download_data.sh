#!/usr/bin/env bash
# Get and prepare BERT data. Sub-commands (each has --help):
#   wikipedia --out DIR [--dump FILE]   download the latest English Wikipedia dump (resumable) and
#                                       extract it to text files (one sentence per line)
#   vocab --out DIR [--train TEXT...]   fetch the bert-large-uncased vocab.txt, or train a WordPiece one
#   prepare --input TEXT... --vocab V --out DIR [--max-seq 128|512] [--no-packing] [--nsp]
#           [--masking dynamic|static]  tokenise, pack and shard samples (your own text files too)
#   squad --out DIR                     download SQuAD v1.1 train/dev JSON
#   phase1 / phase2 --out DIR           the whole chain for a phase: wikipedia, vocab, prepare
#
# Example: scripts/download_data.sh phase1 --out data/bert
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
if [[ $# -eq 0 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  echo "usage: download_data.sh {wikipedia,vocab,prepare,squad,phase1,phase2} [options]"
  exec "${PYTHON:-python}" -m bert.data --help
fi
command=$1
shift
case "$command" in
  phase1|phase2)
    out=data/bert
    while [[ $# -gt 0 ]]; do
      case "$1" in
        --out) out=$2; shift 2 ;;
        *) echo "unknown option $1 (phase1/phase2 take --out DIR)" >&2; exit 2 ;;
      esac
    done
    seq=128; [[ "$command" == phase2 ]] && seq=512
    [[ -d "$out/wikipedia/text" ]] || "${PYTHON:-python}" -m bert.data wikipedia --out "$out/wikipedia"
    [[ -f "$out/vocab/vocab.txt" ]] || "${PYTHON:-python}" -m bert.data vocab --out "$out/vocab"
    exec "${PYTHON:-python}" -m bert.data prepare --input "$out/wikipedia/text" --vocab "$out/vocab/vocab.txt" \
      --out "$out/$command" --max-seq "$seq"
    ;;
  *) exec "${PYTHON:-python}" -m bert.data "$command" "$@" ;;
esac
