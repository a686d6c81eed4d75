#!/usr/bin/env python3
"""Writes weight variants of a GGUF: every tensor stored in SOURCE_TYPE is dequantized to float32
and quantized again to each target type with gguf-py's reference quantizers; every other tensor
(the F32 norms, the Q8_0 token embedding of the default model) and every metadata key are copied
as they are, except general.file_type. Deterministic: the same gguf and numpy versions write the
same bytes, which scripts/make-weight-variants checks by SHA-256.

    make_weight_variants.py SOURCE.gguf SOURCE_TYPE OUT_DIR STEM TYPE...

writes OUT_DIR/STEM.TYPE.gguf for each TYPE (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), via a temporary
file renamed into place, so a killed run never leaves a partial model under the final name.
"""
import os
import sys

import numpy as np
import gguf

# llama.cpp's llama_ftype numbers for files whose weights are mostly of one type.
FILE_TYPE = {"Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9}


def write_variant(reader, source_type, target, out_path):
    qtype = gguf.GGMLQuantizationType[target]
    tmp = out_path + ".partial"
    writer = gguf.GGUFWriter(tmp, arch=str(bytes(reader.fields[gguf.Keys.General.ARCHITECTURE].parts[-1]), "utf-8"))
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        value = FILE_TYPE[target] if field.name == gguf.Keys.General.FILE_TYPE else field.contents()
        val_type = field.types[0]
        sub_type = field.types[-1] if val_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, val_type, sub_type=sub_type)
    if gguf.Keys.General.FILE_TYPE not in reader.fields:
        writer.add_file_type(FILE_TYPE[target])

    tensors = []
    for t in reader.tensors:
        if t.tensor_type == source_type:
            # GGUF lists dimensions innermost first; numpy wants them outermost first.
            shape = tuple(int(d) for d in reversed(t.shape))
            weights = gguf.dequantize(t.data, source_type).reshape(shape).astype(np.float32)
            data = gguf.quantize(weights, qtype)
            tensors.append((t.name, data, qtype))
        else:
            tensors.append((t.name, t.data, t.tensor_type))
    for name, data, ttype in tensors:
        writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes, ttype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, data, _ in tensors:
        writer.write_tensor_data(data)
    writer.close()
    os.replace(tmp, out_path)


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    source, source_type_name, out_dir, stem = sys.argv[1:5]
    targets = sys.argv[5:]
    for target in targets:
        if target not in FILE_TYPE:
            sys.exit(f"make_weight_variants.py: unsupported target type {target}; one of {', '.join(FILE_TYPE)}")
    source_type = gguf.GGMLQuantizationType[source_type_name]
    reader = gguf.GGUFReader(source)
    if not any(t.tensor_type == source_type for t in reader.tensors):
        sys.exit(f"{source}: no tensor is stored as {source_type_name}")
    for target in targets:
        out_path = os.path.join(out_dir, f"{stem}.{target}.gguf")
        write_variant(reader, source_type, target, out_path)
        print(out_path)


if __name__ == "__main__":
    main()
