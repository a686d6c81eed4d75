#!/usr/bin/env python3
"""Writes a copy of a Llama GGUF that keeps only its first N decoder blocks.

Offline tooling for ci/gpu-bundle.sh: a lent GPU machine cannot download the default model and
only 64 MiB travel to it, so the GPU-vs-CPU eval there runs on the default model cut to a few
layers (same tokenizer, embedding, norms and head; every metadata key copied, block_count set to
N). The output is a real model for comparing backends, not for quality numbers.

Needs the `gguf` package (gguf-py, llama.cpp's reader/writer), installed by the caller into a
throwaway virtual environment; never used by kvgate itself.
"""
import argparse
import re
import sys

import gguf


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--embedding-q4-0", action="store_true",
                    help="store token_embd.weight (and so a tied output head) as Q4_0: the default "
                         "model's Q8_0 embedding is 30 MB of the slice's 41, most of what travels")
    args = ap.parse_args()

    reader = gguf.GGUFReader(args.src)
    arch = reader.fields["general.architecture"].contents()
    count_key = f"{arch}.block_count"
    blocks = int(reader.fields[count_key].contents())
    if not 1 <= args.layers <= blocks:
        print(f"{args.src}: --layers must be 1..{blocks}", file=sys.stderr)
        return 2

    writer = gguf.GGUFWriter(args.dst, arch=arch, use_temp_file=False)
    for name, field in reader.fields.items():
        # The writer emits the version/counts and the architecture itself.
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = args.layers if name == count_key else field.contents()
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, value, vtype, sub_type=sub_type)

    block = re.compile(r"^blk\.(\d+)\.")
    kept = []
    for t in reader.tensors:
        if (m := block.match(t.name)) and int(m.group(1)) >= args.layers:
            continue
        data, qtype = t.data, t.tensor_type
        q4_0 = gguf.GGMLQuantizationType.Q4_0
        if args.embedding_q4_0 and t.name == "token_embd.weight" and qtype != q4_0:
            data, qtype = gguf.quants.quantize(gguf.quants.dequantize(data, qtype), q4_0), q4_0
        kept.append((t.name, data, qtype))
    for name, data, qtype in kept:
        writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes, qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, data, _ in kept:
        writer.write_tensor_data(data)
    writer.close()
    print(f"{args.dst}: {args.layers} of {blocks} blocks, {len(kept)} of {len(reader.tensors)} tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
