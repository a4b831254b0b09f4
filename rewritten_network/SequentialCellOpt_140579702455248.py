import sys
import mindspore
from mindspore import nn
from mindspore.nn import Cell
from mindspore.ops import functional as F
#
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore.nn.cell import Cell
from mindspore.nn.layer.normalization import _BatchNorm

class _BatchNormOpt(_BatchNorm, Cell):

    def __init__(self):
        Cell.__init__(self)
        for key, value in _BatchNorm.__dict__.items():
            if not key.startswith('__'):
                setattr(_BatchNormOpt, key, value)
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore import ops
from mindspore.nn.layer.basic import Dense
from mindspore.train.amp import amp_cast

class DenseOpt_1(Dense, Cell):

    def __init__(self, obj):
        Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x_var = amp_cast(x, mindspore.float16)
        x_shape = self.shape_op(x_var)
        x_shape = amp_cast(x_shape, mindspore.float32)
        len_var_1 = len(x_shape)
        compare_var_1 = len_var_1 != 2
        if compare_var_1:
            subscript_var = x_shape[-1]
            usub_var = -1
            tuple_var = (usub_var, subscript_var)
            x_var_4 = amp_cast(x, mindspore.float16)
            tuple_var = amp_cast(tuple_var, mindspore.float16)
            x = self.reshape(x_var_4, tuple_var)
            x = amp_cast(x, mindspore.float32)
        x_var_1 = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        x = self.matmul(x_var_1, weight_var)
        x = amp_cast(x, mindspore.float32)
        if self.has_bias:
            x_var_3 = amp_cast(x, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            x = self.bias_add(x_var_3, bias_var)
            x = amp_cast(x, mindspore.float32)
        if self.activation_flag:
            x = self.activation(x)
        len_var = len(x_shape)
        compare_var = len_var != 2
        if compare_var:
            subscript_var_2 = ops.shape(x)[-1]
            tuple_var_1 = (subscript_var_2,)
            subscript_var_1 = x_shape[:-1]
            out_shape = subscript_var_1 + tuple_var_1
            x_var_2 = amp_cast(x, mindspore.float16)
            out_shape = amp_cast(out_shape, mindspore.float16)
            x = self.reshape(x_var_2, out_shape)
            x = amp_cast(x, mindspore.float32)
        return x

    def extend_repr(self):
        s = f'input_channels={self.in_channels}, output_channels={self.out_channels}'
        if self.has_bias:
            s += f', has_bias={self.has_bias}'
        if self.activation_flag:
            s += f', activation={self.activation}'
        return s
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore.ops.primitive import _primexpr
from mindspore.nn.layer.normalization import BatchNorm1d

class BatchNorm1dOpt(BatchNorm1d, _BatchNormOpt):

    def __init__(self, obj):
        _BatchNormOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)
        self._check_input_dim = obj.__class__._check_input_dim

    @staticmethod
    @_primexpr
    def _check_input_dim(shape, cls_name):

        def _check(dim):
            if dim not in (2, 3):
                raise ValueError(f"For '{cls_name}', the must have 2 dims or 3 dims, but got {dim}.")
        dim = len(shape)
        _check(dim)
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore.nn.layer.activation import ReLU

class ReLUOpt(ReLU, Cell):

    def __init__(self, obj):
        Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, input):
        input = amp_cast(input, mindspore.float16)
        relu_var = self.relu(input)
        relu_var = amp_cast(relu_var, mindspore.float32)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class DenseOpt(Dense, Cell):

    def __init__(self, obj):
        Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x_var = amp_cast(x, mindspore.float16)
        x_shape = self.shape_op(x_var)
        x_shape = amp_cast(x_shape, mindspore.float32)
        len_var_1 = len(x_shape)
        compare_var_1 = len_var_1 != 2
        if compare_var_1:
            subscript_var = x_shape[-1]
            usub_var = -1
            tuple_var = (usub_var, subscript_var)
            x_var_4 = amp_cast(x, mindspore.float16)
            tuple_var = amp_cast(tuple_var, mindspore.float16)
            x = self.reshape(x_var_4, tuple_var)
            x = amp_cast(x, mindspore.float32)
        x_var_1 = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        x = self.matmul(x_var_1, weight_var)
        x = amp_cast(x, mindspore.float32)
        if self.has_bias:
            x_var_3 = amp_cast(x, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            x = self.bias_add(x_var_3, bias_var)
            x = amp_cast(x, mindspore.float32)
        if self.activation_flag:
            x = self.activation(x)
        len_var = len(x_shape)
        compare_var = len_var != 2
        if compare_var:
            subscript_var_2 = ops.shape(x)[-1]
            tuple_var_1 = (subscript_var_2,)
            subscript_var_1 = x_shape[:-1]
            out_shape = subscript_var_1 + tuple_var_1
            x_var_2 = amp_cast(x, mindspore.float16)
            out_shape = amp_cast(out_shape, mindspore.float16)
            x = self.reshape(x_var_2, out_shape)
            x = amp_cast(x, mindspore.float32)
        return x

    def extend_repr(self):
        s = f'input_channels={self.in_channels}, output_channels={self.out_channels}'
        if self.has_bias:
            s += f', has_bias={self.has_bias}'
        if self.activation_flag:
            s += f', activation={self.activation}'
        return s
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')
from collections import OrderedDict
from mindspore.common.recompute import _RecomputeCell
from mindspore.nn.layer.container import SequentialCell

class SequentialCellOpt(SequentialCell, Cell):

    def __init__(self, obj):
        Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)
        self.cell_list[0] = DenseOpt(self.cell_list[0])
        self.cell_list[1] = ReLUOpt(self.cell_list[1])
        self.cell_list[2] = BatchNorm1dOpt(self.cell_list[2])
        self.cell_list[3] = DenseOpt_1(self.cell_list[3])

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.__class__(OrderedDict(list(self._cells.items())[index]))
        index = _valid_index(len(self), index, self.__class__.__name__)
        return list(self._cells.values())[index]

    def __setitem__(self, index, cell):
        cls_name = self.__class__.__name__
        if _valid_cell(cell, cls_name):
            prefix, _ = _get_prefix_and_index(self._cells)
            index = _valid_index(len(self), index, cls_name)
            key = list(self._cells.keys())[index]
            self._cells[key] = cell
            cell.update_parameters_name(prefix + key + '.')
            self.cell_list = list(self._cells.values())

    def __delitem__(self, index):
        cls_name = self.__class__.__name__
        if isinstance(index, int):
            index = _valid_index(len(self), index, cls_name)
            key = list(self._cells.keys())[index]
            del self._cells[key]
            del self._is_dynamic_name[index]
        elif isinstance(index, slice):
            keys = list(self._cells.keys())[index]
            for key in keys:
                del self._cells[key]
            del self._is_dynamic_name[index]
        else:
            raise TypeError(f"For '{cls_name}', the type of index must be int type or slice type, but got {type(index).__name__}")
        prefix, key_index = _get_prefix_and_index(self._cells)
        temp_dict = OrderedDict()
        for idx, key in enumerate(self._cells.keys()):
            cell = self._cells[key]
            if self._is_dynamic_name[idx]:
                for _, param in cell.parameters_and_names():
                    param.name = prefix + str(idx) + '.' + '.'.join(param.name.split('.')[key_index + 1:])
                temp_dict[str(idx)] = cell
            else:
                temp_dict[key] = cell
        self._cells = temp_dict
        self.cell_list = list(self._cells.values())

    def __setattr__(self, name, value):
        from mindspore.common.recompute import _RecomputeCell
        if isinstance(value, _RecomputeCell):
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def __bool__(self):
        return len(self._cells) != 0

    def __len__(self):
        return len(self._cells)

    def set_grad(self, flag=True):
        self.requires_grad = flag
        for cell in self._cells.values():
            cell.set_grad(flag)

    def append(self, cell):
        """
        Appends a given Cell to the end of the list.

        Args:
            cell(Cell): The Cell to be appended.

        Examples:
            >>> import mindspore
            >>> from mindspore import Tensor, nn
            >>> import numpy as np
            >>>
            >>> conv = nn.Conv2d(3, 2, 3, pad_mode='valid', weight_init="ones")
            >>> bn = nn.BatchNorm2d(2)
            >>> relu = nn.ReLU()
            >>> seq = nn.SequentialCell([conv, bn])
            >>> seq.append(relu)
            >>> x = Tensor(np.ones([1, 3, 4, 4]), dtype=mindspore.float32)
            >>> output = seq(x)
            >>> print(output)
            [[[[26.999863 26.999863]
               [26.999863 26.999863]]
              [[26.999863 26.999863]
               [26.999863 26.999863]]]]
        """
        if _valid_cell(cell, self.__class__.__name__):
            prefix, _ = _get_prefix_and_index(self._cells)
            cell.update_parameters_name(prefix + str(len(self)) + '.')
            self._is_dynamic_name.append(True)
            self._cells[str(len(self))] = cell
        self.cell_list = list(self._cells.values())

    def construct(self, input_data):
        self_cell_list = self.cell_list
        for cell in self_cell_list:
            input_data = cell(input_data)
        return input_data

    def _insert(self, index, cell):
        """
        Inserts a given Cell before a given index in the list.

        Args:
            index(int): The Insert index in the CellList.
            cell(Cell): The Cell to be inserted.
        """
        cls_name = self.__class__.__name__
        idx = _valid_index_for_inserting(len(self), index, cls_name)
        _valid_cell(cell, cls_name)
        length = len(self)
        prefix, key_index = _get_prefix_and_index(self._cells)
        while length > idx:
            if self._auto_prefix:
                tmp_cell = self._cells[str(length - 1)]
                for _, param in tmp_cell.parameters_and_names():
                    param.name = f"{prefix}{str(length)}{'.'}{'.'.join(param.name.split('.')[key_index + 1:])}"
            self._cells[str(length)] = self._cells[str(length - 1)]
            length -= 1
        self._cells[str(idx)] = cell
        if self._auto_prefix:
            cell.update_parameters_name(prefix + str(idx) + '.')
        self.cell_list = list(self._cells.values())
        self._is_dynamic_name.insert(index, True)
#