#!/usr/bin/env bash
# Get and prepare BERT data. Sub-commands (each has --help); --data-dir defaults to $DATA_DIR:
#   wikipedia --data-dir DIR [--dump FILE]   download the latest English Wikipedia dump (resumable) and
#                                            extract it to text files (one sentence per line) in DIR/text
#   vocab --data-dir DIR [--train TEXT...]   fetch the bert-large-uncased vocab.txt, or train a WordPiece one
#   prepare --input TEXT... --vocab V --data-dir DIR [--max-seq 128|512] [--no-packing] [--nsp]
#           [--masking dynamic|static]       tokenise, pack and shard samples (your own text files too)
#   squad --data-dir DIR                     download SQuAD v1.1 train/dev JSON
#   squad --from-text TEXT... --data-dir DIR a small SQuAD-format task from text (first-word questions)
#   phase1 / phase2 --data-dir DIR           the whole chain for a phase: DIR/wikipedia, DIR/vocab, then
#                                            DIR/phase1 or DIR/phase2 (what train.sh --data-dir reads)
#
# Example: scripts/download_data.sh phase1 --data-dir data/bert
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
if [[ $# -eq 0 || "$1" == "-h" || "$1" == "--help" ]]; then
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"   # the comment above
  echo "usage: download_data.sh {wikipedia,vocab,prepare,squad,phase1,phase2} --data-dir DIR [options]"
  exec "${PYTHON:-python}" -m zoo.data.bert_prepare --help
fi
command=$1
shift
case "$command" in
  phase1|phase2)
    out=${DATA_DIR:-}
    while [[ $# -gt 0 ]]; do
      case "$1" in
        --data-dir) out=$2; shift 2 ;;
        --out) echo "error: --out was renamed: use --data-dir" >&2; exit 2 ;;
        *) echo "error: unknown option $1 ($command takes --data-dir DIR)" >&2; exit 2 ;;
      esac
    done
    if [[ -z "$out" ]]; then
      echo "error: $command needs --data-dir DIR (or DATA_DIR)" >&2
      exit 2
    fi
    seq=128; [[ "$command" == phase2 ]] && seq=512
    # extracts again unless DIR/wikipedia/text holds the completion marker of a finished extraction
    "${PYTHON:-python}" -m zoo.data.bert_prepare wikipedia --data-dir "$out/wikipedia"
    [[ -f "$out/vocab/vocab.txt" ]] || "${PYTHON:-python}" -m zoo.data.bert_prepare vocab --data-dir "$out/vocab"
    exec "${PYTHON:-python}" -m zoo.data.bert_prepare prepare --input "$out/wikipedia/text" --vocab "$out/vocab/vocab.txt" \
      --data-dir "$out/$command" --max-seq "$seq"
    ;;
  *) exec "${PYTHON:-python}" -m zoo.data.bert_prepare "$command" "$@" ;;
esac
