"""An attention's scale as a muP fact (mutransfer.mup.declare_attention, operators.attention_facts): set by
set_base_shapes to its author's value × √(d0_h/d_h), the same as the built-in operators' own width-muP, and
refused in one line where it is declared wrongly or in one instance only."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from mutransfer import mup
from operators import ONO, GalerkinTransformer
from operators.errors import OperatorConfigError
from operators.galerkin import GalerkinAttention
from operators.width_mup import attention_scale


class DotAttention(nn.Module):
    """A user's softmax attention over (B, n, width), written with SP's 1/√d_h and declared."""

    def __init__(self, width: int, heads: int, declared: bool = True):
        super().__init__()
        self.heads, self.head_dim = heads, width // heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.scale = self.head_dim**-0.5
        if declared:
            mup.declare_attention(self, head_dim=self.head_dim, scale="scale")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, w = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        z = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=self.scale)
        return self.out(z.transpose(1, 2).reshape(b, n, w))


class UserTransformer(nn.Module):
    def __init__(self, width: int, heads: int = 4, declared: bool = True):
        super().__init__()
        self.lift = nn.Linear(1, width)
        self.attention = DotAttention(width, heads, declared)
        self.readout = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.readout(self.attention(self.lift(x)))


def test_a_declared_attention_gets_mups_one_over_d_h_from_the_base_and_keeps_it_when_rebuilt():
    model = mup.set_base_shapes(UserTransformer(64), UserTransformer(16))
    # d_h 16 against the base's 4: SP's 1/√16 becomes muP's √4/16 (mup's attn_mult convention)
    assert model.attention.scale == pytest.approx(attention_scale(16, "mup", 4)) == pytest.approx(2 / 16)
    again = mup.set_base_shapes(model, UserTransformer(16), rescale_params=False)
    assert again.attention.scale == pytest.approx(2 / 16)  # from the author's value, not compounded
    base = mup.set_base_shapes(UserTransformer(16), UserTransformer(16))
    assert base.attention.scale == pytest.approx(1 / math.sqrt(4))  # at the base's size: as its author wrote it
    assert mup.describe(model).splitlines()[-1].split() == ["attention", "scale", "16/4", "0.5"]


def test_the_attention_is_undeclared_by_default_and_then_keeps_its_authors_scale():
    model = mup.set_base_shapes(UserTransformer(64, declared=False), UserTransformer(16, declared=False))
    assert model.attention.scale == pytest.approx(1 / 4)  # undeclared: SP's 1/sqrt(d_h) at every width
    assert "scale attribute" not in mup.describe(model)


@pytest.mark.parametrize("cls", [GalerkinTransformer, ONO])
def test_the_built_in_attentions_facts_set_the_scale_their_own_width_mup_sets(cls):
    """One mechanism: built in SP, the facts give each Galerkin attention the scale that the operator's own
    width-muP (width_parametrization='mup') builds it with."""
    kw = {"coord_dim": 1, "in_channels": 1, "out_channels": 1}
    model = mup.set_base_shapes(cls(width=64, **kw), cls(width=16, **kw))
    own = cls(width=64, width_parametrization="mup", base_width=16, **kw)
    ours = {n: m.scale for n, m in model.named_modules() if isinstance(m, GalerkinAttention)}
    theirs = {n: m.scale for n, m in own.named_modules() if isinstance(m, GalerkinAttention)}
    assert ours and ours == pytest.approx(theirs)
    assert all(s != 1.0 for s in ours.values())


@pytest.mark.parametrize(
    "call, needle",
    [
        (lambda: mup.declare_attention(torch.zeros(2), head_dim=4), "is not an nn.Module; pass the attention"),
        (lambda: mup.declare_attention(nn.Linear(2, 2), head_dim=0), "head_dim 0: give d_h, a positive integer"),
        (lambda: mup.declare_attention(nn.Linear(2, 2), head_dim=2), "Linear.scale does not exist; set it to the"),
        (  # the wrong module: its attribute is a tensor, named by its type, not printed
            lambda: mup.declare_attention(nn.Linear(2, 2), head_dim=2, scale="weight"),
            "Linear.weight is a Parameter; declare the attention module whose forward multiplies by it",
        ),
        (
            lambda: mup.declare_attention(DotAttention(8, 2), head_dim=4, scale="temp"),
            "name that attribute with scale=",
        ),
        (
            lambda: mup.set_base_shapes(UserTransformer(64), UserTransformer(16, declared=False)),
            "the attention 'attention' is declared in the model but not in the base; call mup.declare_attention",
        ),
        (
            lambda: mup.set_base_shapes(UserTransformer(64, declared=False), UserTransformer(16)),
            "the attention 'attention' is declared in the base but not in the model; call mup.declare_attention",
        ),
        (
            lambda: mup.declare_attention(DotAttention(8, 2, declared=False), head_dim=4, scale=0.5),
            "scale= takes the attribute's name, not its value (float); e.g. scale='scale'",
        ),
    ],
)
def test_misdeclared_attentions_are_one_line_naming_the_fix(call, needle):
    with pytest.raises(OperatorConfigError) as info:
        call()
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_a_mismatch_is_refused_before_anything_is_changed():
    model = UserTransformer(64)
    before = {n: p.clone() for n, p in model.named_parameters()}
    with pytest.raises(OperatorConfigError):
        mup.set_base_shapes(model, UserTransformer(16, declared=False))
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
    assert all(mup.shape_of(p) is None for p in model.parameters())
    assert model.attention.scale == pytest.approx(1 / 4)
