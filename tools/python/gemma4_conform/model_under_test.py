"""A model under test: someone's Gemma-4 ``nn.Module``, built by their factory, loaded with a
golden's weights and run for one training step, its results named as the golden's ``expected/``.

The contract (README, "Judging a whole model"): ``FACTORY(config: dict, dtype, device: str)``
returns a module that behaves like a transformers causal LM. ``dtype`` is a ``torch.dtype``
(torch.float32, torch.bfloat16, torch.float16), as PyTorch code takes it
(``Gemma4ForCausalLM._from_config(cfg, torch_dtype=dtype)``); a factory whose dtype parameter (its
second, or the one named ``dtype``) is annotated ``str`` gets the name instead ("f32", "bf16",
"f16"), as factories did before (``factory_dtype``). The module:
- ``forward(input_ids=, attention_mask=, labels=, output_hidden_states=)`` returns an object with
  ``.loss``, ``.logits`` and ``.hidden_states`` (transformers' meaning: L + 1 tensors, the last
  after the final norm);
- ``state_dict()`` keys are checkpoint keys, in either layout (``model.layers.N...`` as
  Gemma4ForCausalLM saves them, ``model.language_model.layers.N...`` as the released checkpoints);
- ``gradient_checkpointing_enable()`` turns activation checkpointing on (in training mode).
"""
from __future__ import annotations

import dataclasses
import inspect
import threading
from typing import Callable, Optional

import torch

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}

# The two checkpoint layouts (GEMMA4.md, "Conventions that changed"): where the decoder's names
# (golden weight names: embed_tokens.weight, layers.N..., norm.weight) sit in a module's state_dict.
LAYOUTS = {"causal-lm": "model.", "conditional-generation": "model.language_model."}


class ModelError(Exception):
    """The module broke the contract: the message names the field, key or call."""


class NotSupported(Exception):
    """Raised by a factory for a config, dtype or device it does not support: the check is reported
    'not supported' with this reason, never failed."""


def one_line(error: BaseException) -> str:
    """An exception as the one line a report row carries."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def layout_of(module: torch.nn.Module) -> str:
    """Which LAYOUTS entry the module's state_dict uses, from where its embed_tokens.weight sits."""
    keys = list(module.state_dict().keys())
    for name, prefix in sorted(LAYOUTS.items(), key=lambda kv: -len(kv[1])):
        if prefix + "embed_tokens.weight" in keys:
            return name
    shown = ", ".join(keys[:4])
    raise ModelError(f"state_dict has neither model.embed_tokens.weight nor model.language_model.embed_tokens.weight "
                     f"(first keys: {shown})")


def checkpoint_key(golden_name: str, layout: str) -> str:
    """A golden weight name as a checkpoint key of `layout` (the LM head sits outside the decoder)."""
    return golden_name if golden_name == "lm_head.weight" else LAYOUTS[layout] + golden_name


@dataclasses.dataclass
class Loaded:
    module: torch.nn.Module
    layout: str                    # the module's own layout
    left_at_init: list[str]        # module keys no golden weight filled (e.g. unused k/v of KV-shared layers)
    golden_weights: frozenset      # the golden's weight names: the gradients judged

    def note(self) -> str:
        if not self.left_at_init:
            return ""
        shown = ", ".join(self.left_at_init[:3]) + (" ..." if len(self.left_at_init) > 3 else "")
        return f"{len(self.left_at_init)} module tensors not in the golden, left as the factory made them: {shown}"


def resolve(spec: str, option: str = "--factory"):
    """MODULE:FACTORY -> the callable; raises ValueError with one line (naming `option`) when it cannot."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"{option} {spec!r}: expected MODULE:FACTORY")
    try:
        obj = importlib.import_module(module_name)
    except Exception as e:  # the user's module: whatever its import raises is reported
        raise ValueError(f"{option} {spec}: cannot import {module_name}: {type(e).__name__}: {e}") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{option} {spec}: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{option} {spec}: {attr} is not callable")
    return obj


def wants_dtype_name(factory: Callable) -> bool:
    """Whether the factory's dtype parameter (the one named dtype, else its second) is annotated str
    (the class, or "str" under `from __future__ import annotations`): it then gets "f32", "bf16" or
    "f16"; every other factory gets a torch.dtype."""
    try:
        parameters = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # a builtin or C callable without a signature
        return False
    named = [p for p in parameters if p.name == "dtype"]
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    parameter = named[0] if named else (positional[1] if len(positional) > 1 else None)
    return parameter is not None and parameter.annotation in (str, "str")


def factory_dtype(factory: Callable, dtype: str):
    """What the factory receives for the dtype named `dtype` (wants_dtype_name says which form)."""
    return dtype if wants_dtype_name(factory) else DTYPES[dtype]


class ModelUnderTest:
    """The factory and where it runs; builds, loads and runs modules for the checks. `dtype` is the
    dtype's name ("f32", "bf16", "f16"); the factory gets it as factory_dtype says."""

    def __init__(self, factory: Callable, name: str, device: str, dtype: str):
        self.factory, self.name, self.device, self.dtype = factory, name, device, dtype

    def build(self, config: dict, dtype: Optional[str] = None) -> torch.nn.Module:
        dtype = dtype or self.dtype
        try:
            module = self.factory(dict(config), factory_dtype(self.factory, dtype), self.device)
        except NotSupported:
            raise
        except Exception as e:  # the user's factory: whatever it raises is the row's reason
            raise ModelError(f"the factory raised {one_line(e)}") from e
        if not isinstance(module, torch.nn.Module):
            raise ModelError(f"the factory returned {type(module).__name__}, not a torch.nn.Module")
        return module

    def load(self, config: dict, weights: dict, dtype: Optional[str] = None, other_layout: bool = False) -> Loaded:
        """A fresh module with the golden's weights, in the module's own layout or, with
        `other_layout`, in the other one; a module that refuses them raises ModelError (naming both)."""
        module = self.build(config, dtype)
        own = layout_of(module)
        layout = next(name for name in LAYOUTS if name != own) if other_layout else own
        state = module.state_dict()
        given = {checkpoint_key(n, layout): w for n, w in weights.items()}
        for key, w in given.items():
            if not other_layout and key in state and tuple(state[key].shape) != tuple(w.shape):
                raise ModelError(f"weight {key}: the module has shape {tuple(state[key].shape)}, the golden "
                                 f"{tuple(w.shape)}")
        try:
            result = module.load_state_dict(given, strict=False)
        except Exception as e:
            raise ModelError(f"load_state_dict refused the golden's weights: {one_line(e)}") from e
        if result.unexpected_keys:
            shown = ", ".join(result.unexpected_keys[:3])
            where = f"state_dict is in the {own} layout; the {layout} layout is refused: " if other_layout else ""
            raise ModelError(f"{where}the module has no tensor for {len(result.unexpected_keys)} golden weights "
                             f"({shown})")
        # A tied LM head is the embedding itself: not left at initialisation.
        filled = {state[k].data_ptr() for k in given if k in state}
        left = sorted(k for k in result.missing_keys if state[k].data_ptr() not in filled)
        return Loaded(module, own, left, frozenset(weights))


def golden_names(module: torch.nn.Module, layout: str) -> dict[str, str]:
    """Module parameter name -> golden weight name (a tied LM head is the embedding's)."""
    prefix = LAYOUTS[layout]
    names = {}
    for name, _ in module.named_parameters():
        if name.startswith(prefix):
            names[name] = name[len(prefix):]
        elif name == "lm_head.weight":
            names[name] = name
    return names


def accepts(module: torch.nn.Module, keyword: str) -> bool:
    """Whether the module's forward takes `keyword` by name (or any keyword, **kwargs)."""
    try:
        parameters = inspect.signature(module.forward).parameters.values()
        return any(p.name == keyword or p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters)
    except (TypeError, ValueError):
        return False


@dataclasses.dataclass
class StepOptions:
    backward: bool = True
    checkpoint: bool = False
    use_cache: Optional[bool] = None            # None: not passed
    backward_thread: bool = False               # backward on a new Python thread (CPU: another thread)
    between: Optional[Callable[[], None]] = None  # called after the forward, before backward (a barrier)


@dataclasses.dataclass
class StepResult:
    tensors: dict          # outputs/loss, outputs/logits, outputs/hidden_states/i, grads/<golden name>
    grads: dict            # every parameter's gradient by module name (None: it got none)
    notes: list


def _forward(module, inputs: dict, options: StepOptions, with_labels: bool):
    kwargs = {"input_ids": inputs["input_ids"], "output_hidden_states": True}
    if "attention_mask" in inputs:
        kwargs["attention_mask"] = inputs["attention_mask"]
    if with_labels and "labels" in inputs:
        kwargs["labels"] = inputs["labels"]
    if options.use_cache is not None:
        kwargs["use_cache"] = options.use_cache
    return module(**kwargs)


def _backward_on_thread(loss: torch.Tensor) -> None:
    error = []

    def run():
        try:
            loss.backward()
        except BaseException as e:  # re-raised on the calling thread
            error.append(e)

    worker = threading.Thread(target=run, name="gemma4-conform-backward")
    worker.start()
    worker.join()
    if error:
        raise error[0]


def run_step(loaded: Loaded, inputs: dict, device: str, options: StepOptions = StepOptions()) -> StepResult:
    """One training step (train mode) of a loaded module; tensors detached on the CPU."""
    module = loaded.module
    inputs = {k: v.to(device) for k, v in inputs.items()}
    notes = []
    module.train()
    if options.checkpoint:
        if not hasattr(module, "gradient_checkpointing_enable"):
            raise ModelError("the module has no gradient_checkpointing_enable()")
        module.gradient_checkpointing_enable()
    module.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(options.backward):
        out = _forward(module, inputs, options, with_labels=True)
    if options.between is not None:
        options.between()
    loss, logits, hidden = (getattr(out, k, None) for k in ("loss", "logits", "hidden_states"))
    tensors = {}
    if loss is not None:
        tensors["outputs/loss"] = loss.detach().float().cpu()
    if options.backward:
        if loss is None:
            raise ModelError("forward(labels=...) returned no .loss: nothing to run backward from")
        if options.backward_thread:
            _backward_on_thread(loss)
        else:
            loss.backward()
    if logits is None:
        # Some patches (Liger's fused linear cross-entropy) skip the logits when given labels in
        # training; the logits come from the same module called without labels.
        with torch.no_grad():
            again = _forward(module, inputs, StepOptions(use_cache=options.use_cache), with_labels=False)
        logits, hidden = again.logits, hidden if hidden is not None else again.hidden_states
        notes.append("logits from a forward without labels (the training forward returned none)")
    if logits is None:
        raise ModelError("forward returned no .logits, with or without labels")
    tensors["outputs/logits"] = logits.detach().cpu()
    for i, h in enumerate(hidden or ()):
        tensors[f"outputs/hidden_states/{i}"] = h.detach().cpu()
    grads = {}
    if options.backward:
        params = dict(module.named_parameters())
        for name, param in params.items():
            grads[name] = None if param.grad is None else param.grad.detach().cpu()
        for name, golden_name in golden_names(module, loaded.layout).items():
            if golden_name not in loaded.golden_weights:
                continue  # a tensor the golden does not have (left at initialisation): not judged
            grad = grads[name]
            tensors[f"grads/{golden_name}"] = torch.zeros_like(params[name], device="cpu") if grad is None else grad
    if loaded.note():
        notes.append(loaded.note())
    return StepResult(tensors, grads, notes)
