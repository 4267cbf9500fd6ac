"""MLflow's ``python_function`` flavor of a mutransfer model: ``mlflow.pyfunc.load_model(uri).predict(array)``.

A model directory (:mod:`mutransfer.serving._artifact`) names this module as its pyfunc ``loader_module``: MLflow
imports it and calls :func:`_load_pyfunc` with the directory, which rebuilds the model from ``config.json`` and
loads ``state_dict.pt`` as tensors, as ``mutransfer evaluate`` does. Nothing is unpickled. The same flavor serves
the model over HTTP (``mlflow models serve -m URI --env-manager local -h 127.0.0.1``).

Input: an array (n, *grid, C_in), float, channel-last as the model was trained (``config.json``: ``input_shape``
is one sample; the model's signature says the same); a grid model takes any resolution its operator supports.
Output: (n, *grid, C_out), float32.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mutransfer.serving._artifact import ModelCard, read_model_dir

#: samples per forward pass
BATCH = 32


class MutransferModel:
    """The rebuilt model (eval mode, CPU) behind ``predict``; ``card`` is its config.json."""

    def __init__(self, model: torch.nn.Module, card: ModelCard):
        self.model, self.card = model, card

    def predict(self, model_input, params: dict | None = None) -> np.ndarray:
        """The model's output for ``model_input`` (module docstring); a ValueError names the shape it takes."""
        x = torch.as_tensor(np.asarray(model_input, dtype=np.float32))
        sample = self.card.input_shape
        if x.ndim != len(sample) + 1 or x.shape[-1] != sample[-1]:
            raise ValueError(
                f"input of shape {tuple(x.shape)}: this model takes (n, {', '.join(map(str, sample))}) "
                f"(n samples, channel-last; trained on {self.card.problem})"
            )
        with torch.no_grad():
            out = [self.model(x[i : i + BATCH]).float() for i in range(0, x.shape[0], BATCH)]
        return torch.cat(out).numpy() if out else np.zeros((0, *self.card.output_shape), dtype=np.float32)


def _load_pyfunc(path: str) -> MutransferModel:
    """MLflow's entry point (``loader_module``): ``path`` is the model directory."""
    model, card = read_model_dir(Path(path))
    return MutransferModel(model, card)
