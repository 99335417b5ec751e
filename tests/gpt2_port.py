"""The GPT-2 page's training loop (seed 003, Ray Train ``JaxTrainer``), ported AS WRITTEN.

Changed: ``ray.train`` -> ``jaxnb``; Ray Data -> a Grain dataset built the
same way (random start indices into a ``.bin`` token memmap, ``x``/``y`` windows read per
row); small sizes and a byte-level vocabulary (tokens from Python's own standard-library
source, nothing downloaded); float32 on CPU. Added, marked ``# added``: resuming (the page
never resumes) — the optimizer state and the validation average go into the checkpoint it
already writes, ``get_checkpoint().restore`` reads it back, the loop starts at its step —
and ``preempt_after_step``, which ends the first run early as a preemption would.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as orbax
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxnb  # was: import ray; from ray import train  (ray.train.X / train.X -> jaxnb.X)
from jaxnb import Checkpoint  # was: from ray.train import Checkpoint

# ---- Step 1/2: token files and a dataset built the same way as the page's Ray Dataset ----


def write_token_files(folder: str) -> None:
    """train.bin / val.bin in nanoGPT's format (uint16), from the standard library's source."""
    import importlib
    import inspect

    text = "\n".join(inspect.getsource(importlib.import_module(m))
                     for m in ("argparse", "textwrap", "fractions", "heapq"))
    tokens = np.frombuffer(text.encode(), np.uint8).astype(np.uint16)
    split = int(0.9 * len(tokens))
    os.makedirs(folder, exist_ok=True)
    tokens[:split].tofile(os.path.join(folder, "train.bin"))
    tokens[split:].tofile(os.path.join(folder, "val.bin"))


def make_bin_xy_dataset(bin_path: str, seqlen: int, *, num_sequences: int, seed: int = 0,
                        dtype=np.uint16):
    """The page's ``make_bin_xy_dataset``, with Grain: rows x, y: int32[seqlen]."""
    import grain  # was: import ray.data

    if not os.path.exists(bin_path):
        raise FileNotFoundError(bin_path)
    data = np.memmap(bin_path, dtype=dtype, mode="r")
    n = int(len(data))  # noqa: RUF046 (as on the page)
    if n <= seqlen + 1:
        raise ValueError(f"{bin_path} too small: len={n}, seqlen={seqlen}")
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, n - (seqlen + 1), size=num_sequences, dtype=np.int64)

    def read_xy(start):
        window = data[start: start + seqlen + 1].astype(np.int32, copy=False)
        return {"x": window[:-1], "y": window[1:]}

    return grain.MapDataset.source(starts).map(read_xy)  # was: ray.data.from_items + map_batches


# ---- Step 3: the model, as on the page (sizes in the config) -------------------------------


@dataclass(frozen=True)
class TrainingConfig:
    vocab_size: int = 256  # was: tiktoken's gpt2 n_vocab (bytes here)
    num_transformer_blocks: int = 1
    seqlen: int = 32
    embed_dim: int = 32
    num_heads: int = 2
    dropout_rate: float = 0.1

    dtype = jnp.float32  # was: jnp.bfloat16 (CPU here)
    param_dtype = jnp.float32

    @property
    def feed_forward_dim(self) -> int:
        return 4 * self.embed_dim

    init_learning_rate: float = 5e-3
    weight_decay: float = 1e-1

    global_batch_size: int = 8
    max_steps: int = 40
    log_every_n_steps: int = 5
    val_every_n_steps: int = 10
    checkpoint_every_n_steps: int = 10

    checkpoint_root: str = "/tmp/checkpoint"  # was: /mnt/cluster_storage/checkpoint
    preempt_after_step: int = 0  # added: end the run here, as a preemption would


dtype = TrainingConfig.dtype
param_dtype = TrainingConfig.param_dtype


def causal_attention_mask(seq_len):
    return jnp.tril(jnp.ones((seq_len, seq_len)))


def _partitioned(init, names):
    return nnx.with_partitioning(init, names)


class TransformerBlock(nnx.Module):
    def __init__(self, embed_dim, num_heads, ff_dim, dropout_rate, rngs):
        ones, zeros = nnx.initializers.ones_init(), nnx.initializers.zeros_init()
        xavier = nnx.initializers.xavier_uniform()
        self.layer_norm1 = nnx.LayerNorm(epsilon=1e-6, num_features=embed_dim,
                                         scale_init=_partitioned(ones, ("model",)),
                                         bias_init=_partitioned(zeros, ("model",)),
                                         dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.mha = nnx.MultiHeadAttention(num_heads=num_heads, in_features=embed_dim,
                                          kernel_init=_partitioned(xavier, (None, "model")),
                                          bias_init=_partitioned(zeros, ("model",)),
                                          dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.dropout1 = nnx.Dropout(rate=dropout_rate, rngs=rngs)
        self.layer_norm2 = nnx.LayerNorm(epsilon=1e-6, num_features=embed_dim,
                                         scale_init=_partitioned(ones, ("model",)),
                                         bias_init=_partitioned(zeros, ("model",)),
                                         dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.linear1 = nnx.Linear(in_features=embed_dim, out_features=ff_dim,
                                  kernel_init=_partitioned(xavier, (None, "model")),
                                  bias_init=_partitioned(zeros, ("model",)),
                                  dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.linear2 = nnx.Linear(in_features=ff_dim, out_features=embed_dim,
                                  kernel_init=_partitioned(xavier, (None, "model")),
                                  bias_init=_partitioned(zeros, ("model",)),
                                  dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.dropout2 = nnx.Dropout(rate=dropout_rate, rngs=rngs)

    def __call__(self, inputs, training: bool = False):
        _, seq_len, _ = inputs.shape
        attention_output = self.mha(inputs_q=self.layer_norm1(inputs),
                                    mask=causal_attention_mask(seq_len), decode=False)
        x = inputs + self.dropout1(attention_output, deterministic=not training)
        mlp_output = nnx.gelu(self.linear1(self.layer_norm2(x)))
        mlp_output = self.dropout2(self.linear2(mlp_output), deterministic=not training)
        return x + mlp_output


class TokenAndPositionEmbedding(nnx.Module):
    def __init__(self, seqlen, vocab_size, embed_dim, rngs):
        self.token_emb = nnx.Embed(num_embeddings=vocab_size, features=embed_dim, dtype=dtype,
                                   param_dtype=param_dtype, rngs=rngs)
        self.pos_emb = nnx.Embed(num_embeddings=seqlen, features=embed_dim, dtype=dtype,
                                 param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x):
        positions = jnp.arange(0, x.shape[1])[None, :]
        return self.token_emb, self.token_emb(x) + self.pos_emb(positions)


class GPT2(nnx.Module):
    def __init__(self, seqlen, vocab_size, embed_dim, num_heads, dropout_rate, feed_forward_dim,
                 num_transformer_blocks, rngs):
        self.embedding_layer = TokenAndPositionEmbedding(seqlen, vocab_size, embed_dim, rngs=rngs)
        self.dropout = nnx.Dropout(rate=dropout_rate, rngs=rngs)
        self.transformer_blocks = nnx.List([
            TransformerBlock(embed_dim, num_heads, feed_forward_dim, dropout_rate, rngs=rngs)
            for _ in range(num_transformer_blocks)])
        self.layer_norm = nnx.LayerNorm(
            epsilon=1e-6, num_features=embed_dim,
            scale_init=_partitioned(nnx.initializers.ones_init(), ("model",)),
            bias_init=_partitioned(nnx.initializers.zeros_init(), ("model",)),
            dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, inputs, training: bool = False):
        token_embedding, x = self.embedding_layer(inputs)
        x = self.dropout(x, deterministic=not training)
        for transformer_block in self.transformer_blocks:
            x = transformer_block(x, training=training)
        return token_embedding.attend(self.layer_norm(x))


def create_model(*, rngs, config):
    return GPT2(seqlen=config.seqlen, vocab_size=config.vocab_size, embed_dim=config.embed_dim,
                num_heads=config.num_heads, dropout_rate=config.dropout_rate,
                feed_forward_dim=config.feed_forward_dim,
                num_transformer_blocks=config.num_transformer_blocks, rngs=rngs)


@nnx.jit
def loss_fn_train(model, batch):
    logits = model(batch[0], training=True)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits=logits, labels=batch[1]).mean()
    return loss, logits


@nnx.jit
def loss_fn_eval(model, batch):
    logits = model(batch[0], training=False)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits=logits, labels=batch[1]).mean()
    return loss, logits


@nnx.jit
def train_step(model, optimizer, metrics, batch):
    grad_fn = nnx.value_and_grad(loss_fn_train, has_aux=True)
    (loss, logits), grads = grad_fn(model, batch)
    metrics.update(loss=loss, logits=logits, labels=batch[1])
    optimizer.update(model, grads)
    return loss


# ---- Step 4: train_loop_per_worker, as on the page ------------------------------------------


def train_loop_per_worker(config_dict: dict) -> None:
    config = TrainingConfig(**config_dict)

    world_rank = jaxnb.get_context().get_world_rank()
    world_size = jaxnb.get_context().get_world_size()
    print(f"Worker rank {world_rank}/{world_size} sees devices: {jax.devices()}")

    device_mesh = mesh_utils.create_device_mesh((jax.process_count(), 1))
    mesh = Mesh(device_mesh, axis_names=("data", "model"))
    data_sharding = NamedSharding(mesh, P("data", None))
    jax.set_mesh(mesh)

    model = create_model(rngs=nnx.Rngs(params=0, dropout=1), config=config)

    train_it = jaxnb.get_dataset_shard("train")
    val_it = jaxnb.get_dataset_shard("val")
    if train_it is None or val_it is None:
        raise RuntimeError("No Ray Train datasets provided. Pass datasets={...} to JaxTrainer.")

    local_batch_size = config.global_batch_size // jax.process_count()
    global_input_shape = (config.global_batch_size, config.seqlen)

    train_batches = iter(train_it.iter_batches(batch_size=local_batch_size, batch_format="numpy",
                                               prefetch_batches=2, drop_last=True))
    val_batches = iter(val_it.iter_batches(batch_size=local_batch_size, batch_format="numpy",
                                           prefetch_batches=2, drop_last=True))

    def make_global_batch(local_x, local_y, global_shape):
        global_x = jax.make_array_from_process_local_data(data_sharding, local_x, global_shape)
        global_y = jax.make_array_from_process_local_data(data_sharding, local_y, global_shape)
        return global_x, global_y

    schedule = optax.cosine_decay_schedule(init_value=config.init_learning_rate,
                                           decay_steps=config.max_steps)
    optax_chain = optax.chain(optax.adamw(learning_rate=schedule, weight_decay=config.weight_decay))
    optimizer = nnx.Optimizer(model, optax_chain, wrt=nnx.Param)

    checkpointer = orbax.PyTreeCheckpointer()
    start_time = time.time()

    train_metrics = nnx.metrics.Average("loss")
    val_metrics = nnx.metrics.Average("val_loss")

    def train_state():  # added: the optimizer and the validation average go in too
        return {"model": nnx.to_pure_dict(nnx.state(model)),
                "optimizer": nnx.to_pure_dict(nnx.state(optimizer)),
                "val_metrics": nnx.to_pure_dict(nnx.state(val_metrics))}

    first_step = 0  # added: resume
    checkpoint = jaxnb.get_checkpoint()
    if checkpoint is not None:
        restored = checkpoint.restore(train_state())
        for obj, part in ((model, "model"), (optimizer, "optimizer"), (val_metrics, "val_metrics")):
            state = nnx.state(obj)
            nnx.replace_by_pure_dict(state, restored[part])
            nnx.update(obj, state)
        first_step = checkpoint.step

    for step in range(first_step, config.max_steps):  # was: range(config.max_steps)
        try:
            local_batch = next(train_batches)
        except StopIteration:
            train_batches = iter(train_it.iter_batches(batch_size=local_batch_size,
                                                       batch_format="numpy", prefetch_batches=2,
                                                       drop_last=True))
            local_batch = next(train_batches)
        global_x, global_y = make_global_batch(local_batch["x"], local_batch["y"],
                                               global_input_shape)

        train_loss = train_step(model, optimizer, train_metrics, (global_x, global_y))

        if (step + 1) % config.log_every_n_steps == 0:
            elapsed = time.time() - start_time
            jaxnb.report({"step": step + 1, "train_loss": float(train_loss),
                              "elapsed_s": elapsed})
            start_time = time.time()

        if (step + 1) % config.val_every_n_steps == 0:
            try:
                local_validation_batch = next(val_batches)
            except StopIteration:
                val_batches = iter(val_it.iter_batches(batch_size=local_batch_size,
                                                       batch_format="numpy", prefetch_batches=2,
                                                       drop_last=True))
                local_validation_batch = next(val_batches)

            global_val_input, global_val_target = make_global_batch(
                local_validation_batch["x"], local_validation_batch["y"], global_input_shape)

            loss, logits = loss_fn_eval(model, (global_val_input, global_val_target))
            val_metrics.update(val_loss=loss, logits=logits)
            val_loss = float(val_metrics.compute())
            metrics = {"step": step + 1, "train_loss": float(train_loss), "val_loss": float(val_loss)}

            checkpoint = None
            if (step + 1) % config.checkpoint_every_n_steps == 0:
                train_state_ = train_state()  # was: nnx.to_pure_dict(nnx.state(model))
                checkpoint_path = os.path.join(config.checkpoint_root, str(step + 1))
                checkpointer.save(checkpoint_path, train_state_)
                checkpoint = Checkpoint.from_directory(checkpoint_path)
            if world_rank == 0:
                jaxnb.report(metrics, checkpoint=checkpoint)
            else:
                jaxnb.report(metrics, checkpoint=None)

        if step + 1 == config.preempt_after_step:  # added
            return
