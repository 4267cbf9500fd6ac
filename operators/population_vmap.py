"""A population of any operator whose forward ``torch.func.vmap`` can batch: the attention operators and a user's
own model, trained as one model whose every parameter carries a leading member dimension.

:class:`~operators.population.PopulationFNO` is written by hand for the FNO's layers. Any other model stacks here
the generic way: its parameters and buffers stacked member-major, its forward run once per member under
``vmap(functional_call)``, which turns every operation of the model into one batched operation over the members.
Where that batches well (many small kernels) the population steps in less time than its members alone; a model
bound by its arithmetic gains little (``python benchmarks/population_vmap.py``: 8 Galerkin proxies of 64 points
in 6.7× one proxy's step, docs/benchmarks.md).

- :class:`VmapPopulation` stacks M models of one class and configuration: input (M, B, …) → output (M, B, …),
  member m with member m's weights only. It has the interface :class:`~operators.population.PopulationAdam` and
  the population trainer need (``size``, ``stacks``, :meth:`~VmapPopulation.member`, :meth:`~VmapPopulation.keep`,
  :meth:`~VmapPopulation.template`).
- :func:`vmap_refusal` says why a model cannot be stacked this way (one phrase), or None: it runs two stacked
  copies of the model forward and backward on one sample. ``vmap`` refuses in-place writes into tensors the
  forward makes (neuraloperator's FNO), ``.item()`` and data-dependent Python control flow (ONO's whitening had both
  until it was made branch-free), and random operations (dropout: a member's draws would differ from its solo run's).

A member computes each step as the model alone does, to float32 rounding (tests/operators/test_population_vmap.py).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn
from torch.func import functional_call, vmap

from operators.errors import OperatorConfigError
from operators.population import member_index
from operators.value_checks import inside_population


def _stack(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.stack([t.detach().clone() for t in tensors])


class VmapPopulation(nn.Module):
    """M models of one class and configuration as one module; parameter ``name`` of member m is
    ``stacks[i][0][m]`` for the ``i`` whose name is ``name``.

    Args:
        members: models of one class with the same parameter and buffer names and shapes (and the same
            ``config``, where they have one); their weights may differ (each trial's own seed).

    Input (M, B, …) → output (M, B, …): member m's forward on ``x[m]``. Raises a one-line
    :class:`OperatorConfigError` for an empty list or members that differ in class, configuration or shapes.
    """

    def __init__(self, members: Sequence[nn.Module]):
        super().__init__()
        if not members:
            raise OperatorConfigError("population: needs at least one member")
        first = members[0]
        shapes = _shapes(first)
        for i, model in enumerate(members):
            if type(model) is not type(first):
                raise OperatorConfigError(
                    f"population member {i}: is a {type(model).__name__}, member 0 a {type(first).__name__}"
                )
            if getattr(model, "config", None) != getattr(first, "config", None) or _shapes(model) != shapes:
                raise OperatorConfigError(
                    f"population member {i}: its configuration or parameter shapes differ from member 0's; a "
                    "population holds members of one configuration (group trials by shape)"
                )
        self.size = len(members)
        # member 0 itself, outside the module's parameters: functional_call runs its forward with the stacked
        # weights, member() copies it, template() reads its per-parameter facts (muP multipliers, weight decay)
        self._blank: tuple[nn.Module] = (first,)
        self._param_names = [name for name, _p in first.named_parameters()]
        self._buffer_names = [name for name, _b in first.named_buffers()]
        by_member = [dict(m.named_parameters()) for m in members]
        self.weights = nn.ParameterList(
            nn.Parameter(_stack([p[name] for p in by_member]), requires_grad=by_member[0][name].requires_grad)
            for name in self._param_names
        )  # each (M, …), in first.named_parameters()'s order
        buffers = [dict(m.named_buffers()) for m in members]
        for i, name in enumerate(self._buffer_names):
            self.register_buffer(f"_buffer_{i}", _stack([b[name] for b in buffers]))

    @property
    def stacks(self) -> list[tuple[nn.Parameter, str]]:
        """(stacked parameter, the name of its counterpart in one member's ``named_parameters``)."""
        return [(p, name) for p, name in zip(self.weights, self._param_names)]

    def _buffers_stacked(self) -> list[torch.Tensor]:
        return [getattr(self, f"_buffer_{i}") for i in range(len(self._buffer_names))]

    def train(self, mode: bool = True) -> VmapPopulation:
        """As ``nn.Module.train``, and the members' model's mode with it (its forward runs under that mode)."""
        super().train(mode)
        self._blank[0].train(mode)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(M, B, …) → (M, B, …): member m's forward on ``x[m]``, with member m's weights."""
        if x.shape[0] != self.size:
            raise OperatorConfigError(
                f"input has {x.shape[0]} members along its first dimension; the population has {self.size}"
            )
        blank = self._blank[0]
        params, buffers = self._param_names, self._buffer_names

        def one(weights: list[torch.Tensor], kept: list[torch.Tensor], xm: torch.Tensor) -> torch.Tensor:
            state = dict(zip(params, weights)) | dict(zip(buffers, kept))
            out: torch.Tensor = functional_call(blank, state, (xm,))
            return out

        with inside_population():  # no checks of the input's values: vmap cannot branch on them
            out: torch.Tensor = vmap(one)(list(self.weights), self._buffers_stacked(), x)
        return out

    def member(self, m: int) -> nn.Module:
        """Member ``m`` as a plain model (a copy of its current weights and buffers, and of the facts a user's model
        keeps on its parameters: operators.base_shapes)."""
        if not 0 <= m < self.size:
            raise OperatorConfigError(f"member {m}: the population has members 0 … {self.size - 1}")
        model = copy.deepcopy(self._blank[0])
        params, buffers = dict(model.named_parameters()), dict(model.named_buffers())
        facts = dict(self._blank[0].named_parameters())
        with torch.no_grad():
            for stacked, name in self.stacks:
                params[name].data = stacked[m].detach().clone()
                params[name].__dict__.update(facts[name].__dict__)  # muP facts on the parameter (deepcopy drops them)
            for stacked_buffer, name in zip(self._buffers_stacked(), self._buffer_names):
                buffers[name].data = stacked_buffer[m].detach().clone()
        return model

    @torch.no_grad()
    def keep(self, members: Sequence[int]) -> None:
        """Keep only ``members`` (indices, in the order given), as :meth:`PopulationFNO.keep` does."""
        rows = member_index(members, self.size)
        for i, p in enumerate(self.weights):
            self.weights[i] = nn.Parameter(p.detach()[rows.to(p.device)].contiguous(), requires_grad=p.requires_grad)
        for i, b in enumerate(self._buffers_stacked()):
            setattr(self, f"_buffer_{i}", b[rows.to(b.device)].contiguous())
        self.size = len(rows)

    def template(self) -> tuple[nn.Module, list[tuple[nn.Parameter, nn.Parameter]]]:
        """The members' model (member 0 as given) and each stacked parameter with the parameter of that model it
        stacks: the per-parameter facts (muP LR multipliers, weight decay) are read from it."""
        one = self._blank[0]
        params = dict(one.named_parameters())
        return one, [(stacked, params[name]) for stacked, name in self.stacks]


def _shapes(model: nn.Module) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
    return [(n, tuple(t.shape), t.dtype) for n, t in (*model.named_parameters(), *model.named_buffers())]


def vmap_refusal(model: nn.Module, sample: torch.Tensor) -> str | None:
    """Why two stacked copies of ``model`` cannot run forward and backward under ``vmap`` on ``sample`` (one input
    (1, …) of the model's, on the model's device), in one phrase; None when they can. The model itself is not
    changed; any exception its forward raises is a reason, never raised."""
    copies = [copy.deepcopy(model) for _ in range(2)]
    try:
        population = VmapPopulation(copies)
        population(sample.unsqueeze(0).expand(2, *sample.shape)).float().square().mean().backward()
    except Exception as exc:  # noqa: BLE001 -- any failure of the user's model here means "train alone", said why
        first = " ".join(str(exc).split())
        return f"vmap cannot batch its forward ({first[:160]})"
    return None
