"""The preference data of the DPO speed benchmark (issue 23; benchmarks/gpu_training_benchmark.sh, shape
llama-3.2-1b-dpo): fast-llm trains on the file written here, PyTorch (benchmarks/torch_gpu_llama_step.py) on the same
documents made again by `preference_pairs` with the same arguments, so both score the same answers.

Each document is one preference pair laid out as `fast-llm prepare` writes it with its default `add_bos` (BOS + prompt +
chosen + EOS, then BOS + prompt + rejected + EOS; chosen span = chosen + EOS, rejected span = rejected + EOS), with
fixed lengths so that both sequences of a pair are exactly `sequence_length` tokens: a document is 2 x sequence_length tokens, and a micro-batch
of batch x sequence_length tokens holds batch / 2 whole documents (fast-llm's sample is micro_batch_size + 1 tokens:
the documents fill it but one padding label). The tokens follow tools/post_training_torch_check.py's random bigram
language (chosen answers continue the prompt in it, rejected ones are uniform tokens; for speed any tokens would do),
and the file is written by that script's `write_memmap` (data/memmap.h's layout with the chosen / rejected range
sections). Plain Python, no torch.

  python3 benchmarks/dpo_benchmark_data.py --shape llama-3.2-1b-dpo --steps 15 --output FILE
"""
import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, str(ROOT / "tools"))
from llama_shapes import SHAPES  # noqa: E402
from post_training_torch_check import BOS, EOS, Language, write_memmap  # noqa: E402

SEED = 23
PROMPT_FRACTION = 0.75  # of each sequence; the answers take the rest


def preference_pairs(vocab_size, count, sequence_length, seed=SEED):
    """`count` preference documents of 2 x sequence_length tokens and their (begin, end) chosen and rejected spans."""
    if sequence_length < 8:
        raise ValueError(f"sequence_length {sequence_length} is too short for a prompt and an answer")
    prompt_length = int(sequence_length * PROMPT_FRACTION) - 1  # BOS + prompt: the fraction
    answer_length = sequence_length - 2 - prompt_length  # BOS + prompt + answer + EOS = sequence_length
    language = Language(vocab_size, min(512, vocab_size - 3), seed)
    documents, chosen, rejected = [], [], []
    for _ in range(count):
        text, _ = language.chain(prompt_length + answer_length)
        prompt, answer = text[:prompt_length], text[prompt_length:]
        document = [BOS] + prompt + answer + [EOS] + [BOS] + prompt + language.uniform(answer_length) + [EOS]
        assert len(document) == 2 * sequence_length
        documents.append(document)
        chosen.append((1 + prompt_length, sequence_length))
        rejected.append((sequence_length + 1 + prompt_length, 2 * sequence_length))
    return documents, chosen, rejected


def pairs_per_step(batch):
    if batch % 2:
        raise ValueError(f"a DPO step's rows come in pairs, got {batch}")
    return batch // 2


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="llama-3.2-1b-dpo",
                        choices=sorted(name for name, shape in SHAPES.items() if shape.get("dpo")))
    parser.add_argument("--steps", type=int, required=True, help="training steps the file must feed")
    parser.add_argument("--output", required=True, help="the .fast_llm_dataset file to write")
    parser.add_argument("--vocab-size", type=int, help="default: the shape's (smaller for a CPU trial run)")
    parser.add_argument("--sequence-length", type=int, help="default: the shape's")
    parser.add_argument("--batch", type=int, help="rows (sequences) per step, default: the shape's")
    args = parser.parse_args()
    shape = SHAPES[args.shape]
    vocab_size = args.vocab_size or shape["vocab_size"]
    sequence_length = args.sequence_length or shape["sequence_length"]
    count = args.steps * pairs_per_step(args.batch or shape["batch"])
    documents, chosen, rejected = preference_pairs(vocab_size, count, sequence_length)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    write_memmap(output, documents, chosen=chosen, rejected=rejected)
    print(f"{output}: {count} preference documents of {2 * sequence_length} tokens (vocabulary {vocab_size})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
