"""Writing .tflite files for the tests: ``Model`` collects tensors and operators and ``write``s
the flatbuffer with the builders of the ``tflite`` package (the published schema), so that the
tests need neither TensorFlow nor downloads. LiteRT's interpreter (``ai_edge_litert``) then runs
the same file as the reference."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

tflite = __import__("pytest").importorskip("tflite")
flatbuffers = __import__("pytest").importorskip("flatbuffers")

TYPES = {"float32": 0, "float16": 1, "int32": 2, "uint8": 3, "int64": 4, "bool": 6, "int16": 7, "int8": 9}


@dataclass
class Model:
    tensors: list = field(default_factory=list)  # (name, shape, dtype, data or None, quant or None)
    ops: list = field(default_factory=list)  # (opcode name, inputs, outputs, options name, {field: value})
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)

    def tensor(self, name, shape, dtype="float32", data=None, quant=None) -> int:
        """A tensor's index; ``data``: a constant; ``quant``: (scales, zero points, axis)."""
        self.tensors.append((name, tuple(shape), dtype, data, quant))
        return len(self.tensors) - 1

    def const(self, name, array, quant=None) -> int:
        array = np.asarray(array)
        return self.tensor(name, array.shape, array.dtype.name, array, quant)

    def input(self, name, shape, dtype="float32", quant=None) -> int:
        i = self.tensor(name, shape, dtype, None, quant)
        self.inputs.append(i)
        return i

    def op(self, opcode, inputs, outputs, options=None, **fields) -> None:
        self.ops.append((opcode, list(inputs), list(outputs), options, fields))

    def write(self) -> bytes:
        b = flatbuffers.Builder(1024)

        def ints(start, values):
            start(b, len(values))
            for v in reversed(values):
                b.PrependInt32(int(v))
            return b.EndVector()

        def floats(start, values):
            start(b, len(values))
            for v in reversed(values):
                b.PrependFloat32(float(v))
            return b.EndVector()

        def longs(start, values):
            start(b, len(values))
            for v in reversed(values):
                b.PrependInt64(int(v))
            return b.EndVector()

        # buffer 0 is the empty buffer every non-constant tensor points at
        buffers, tensor_offsets = [], []
        tflite.BufferStart(b)
        buffers.append(tflite.BufferEnd(b))
        for name, shape, dtype, data, quant in self.tensors:
            buffer_index = 0
            if data is not None:
                raw = np.ascontiguousarray(data, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()
                b.StartVector(1, len(raw), 16)
                for byte in reversed(raw):
                    b.PrependUint8(byte)
                vec = b.EndVector()
                tflite.BufferStart(b)
                tflite.BufferAddData(b, vec)
                buffers.append(tflite.BufferEnd(b))
                buffer_index = len(buffers) - 1
            q = None
            if quant is not None:
                scales, zps, axis = quant
                sv = floats(tflite.QuantizationParametersStartScaleVector, np.ravel(scales))
                zv = longs(tflite.QuantizationParametersStartZeroPointVector, np.ravel(zps))
                tflite.QuantizationParametersStart(b)
                tflite.QuantizationParametersAddScale(b, sv)
                tflite.QuantizationParametersAddZeroPoint(b, zv)
                tflite.QuantizationParametersAddQuantizedDimension(b, axis)
                q = tflite.QuantizationParametersEnd(b)
            shp = ints(tflite.TensorStartShapeVector, shape)
            nm = b.CreateString(name)
            tflite.TensorStart(b)
            tflite.TensorAddShape(b, shp)
            tflite.TensorAddType(b, TYPES[dtype])
            tflite.TensorAddBuffer(b, buffer_index)
            tflite.TensorAddName(b, nm)
            if q is not None:
                tflite.TensorAddQuantization(b, q)
            tensor_offsets.append(tflite.TensorEnd(b))

        codes = sorted({op[0] for op in self.ops})
        code_offsets = []
        for c in codes:
            value = getattr(tflite.BuiltinOperator, c)
            tflite.OperatorCodeStart(b)
            tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(value, 127))
            tflite.OperatorCodeAddBuiltinCode(b, value)
            tflite.OperatorCodeAddVersion(b, 1)
            code_offsets.append(tflite.OperatorCodeEnd(b))

        op_offsets = []
        for opcode, ins, outs, options, fields in self.ops:
            opt = None
            if options is not None:
                getattr(tflite, f"{options}Start")(b)
                for k, v in fields.items():
                    getattr(tflite, f"{options}Add{k}")(b, v)
                opt = getattr(tflite, f"{options}End")(b)
            iv = ints(tflite.OperatorStartInputsVector, ins)
            ov = ints(tflite.OperatorStartOutputsVector, outs)
            tflite.OperatorStart(b)
            tflite.OperatorAddOpcodeIndex(b, codes.index(opcode))
            tflite.OperatorAddInputs(b, iv)
            tflite.OperatorAddOutputs(b, ov)
            if opt is not None:
                tflite.OperatorAddBuiltinOptionsType(b, getattr(tflite.BuiltinOptions, options))
                tflite.OperatorAddBuiltinOptions(b, opt)
            op_offsets.append(tflite.OperatorEnd(b))

        def table_vector(start, offsets):
            start(b, len(offsets))
            for o in reversed(offsets):
                b.PrependUOffsetTRelative(o)
            return b.EndVector()

        tv = table_vector(tflite.SubGraphStartTensorsVector, tensor_offsets)
        opv = table_vector(tflite.SubGraphStartOperatorsVector, op_offsets)
        inv = ints(tflite.SubGraphStartInputsVector, self.inputs)
        outv = ints(tflite.SubGraphStartOutputsVector, self.outputs)
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, tv)
        tflite.SubGraphAddOperators(b, opv)
        tflite.SubGraphAddInputs(b, inv)
        tflite.SubGraphAddOutputs(b, outv)
        sg = tflite.SubGraphEnd(b)
        sgv = table_vector(tflite.ModelStartSubgraphsVector, [sg])
        cv = table_vector(tflite.ModelStartOperatorCodesVector, code_offsets)
        bv = table_vector(tflite.ModelStartBuffersVector, buffers)
        desc = b.CreateString("flowc test")
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, 3)
        tflite.ModelAddOperatorCodes(b, cv)
        tflite.ModelAddSubgraphs(b, sgv)
        tflite.ModelAddDescription(b, desc)
        tflite.ModelAddBuffers(b, bv)
        b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())


def litert(data: bytes, feeds: list) -> list:
    """The outputs of LiteRT's interpreter with its reference kernels on the model ``data`` for
    the inputs ``feeds``."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=data, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), feeds):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]
