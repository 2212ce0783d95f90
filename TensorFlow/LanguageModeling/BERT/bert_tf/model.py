"""BERT as Keras layers: the encoder, the pretraining heads (masked LM + next sentence) and the SQuAD head.

Attention runs through ``keras.ops.dot_product_attention`` (the backend's fused kernel where it has
one, XLA's otherwise). A sample may hold several sequences ("packing"): ``seq_ids`` gives each token
the index (1, 2, ...) of its sequence, 0 for padding; attention stays inside each sequence
(block-diagonal mask) and position ids restart at 0 for every sequence. An unpacked batch is the
case seq_ids = attention_mask. The masked-LM head runs only at ``mlm_positions`` (gathered before the
vocabulary projection, which is most of the head's cost); its decoder is the word-embedding matrix.

Weights are laid out as in Google's original TensorFlow BERT (query, key and value kept apart,
kernels [in, out]), so ``bert_tf.checkpoint`` maps Google's variable names one to one.
"""

from __future__ import annotations

import keras
from keras import ops
from zoo.bert import CONFIGS, BertConfig, bert_config  # noqa: F401 - the sizes both BERTs share, re-exported


def _init(config: BertConfig):
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def _gelu(x):
    """erf GELU, as the PyTorch BERT's F.gelu; written with erf (ONNX has it; Keras' gelu lowers to Erfc)."""
    return 0.5 * x * (1.0 + ops.erf(x * ops.cast(0.7071067811865476, x.dtype)))


def attention_mask_from_seq_ids(seq_ids):
    """[B, T] sequence ids -> [B, 1, T, T] bool: query and key share a sequence (padding sees padding)."""
    return ops.expand_dims(ops.equal(seq_ids[:, :, None], seq_ids[:, None, :]), 1)


def packed_position_ids(seq_ids):
    """Position ids that restart at 0 at the first token of every sequence of a row."""
    length = ops.shape(seq_ids)[1]
    index = ops.arange(length, dtype="int32")
    same = ops.equal(seq_ids[:, :, None], seq_ids[:, None, :])
    first = ops.min(ops.where(same, index[None, None, :], length), axis=-1)  # sequences are contiguous
    return index[None, :] - first


def gather_positions(hidden, positions):
    """hidden [B, T, H], positions [B, P] -> [B, P, H]."""
    return ops.take_along_axis(hidden, ops.cast(positions, "int32")[:, :, None], axis=1)


class TransformerLayer(keras.layers.Layer):
    """Post-LayerNorm transformer layer (Google's layout: separate query/key/value projections)."""

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(**kwargs)
        hidden, init = config.hidden_size, _init(config)
        self.num_heads = config.num_heads
        self.query = keras.layers.Dense(hidden, kernel_initializer=init, name="query")
        self.key = keras.layers.Dense(hidden, kernel_initializer=init, name="key")
        self.value = keras.layers.Dense(hidden, kernel_initializer=init, name="value")
        self.attention_output = keras.layers.Dense(hidden, kernel_initializer=init, name="attention_output")
        self.attention_norm = keras.layers.LayerNormalization(
            epsilon=config.layer_norm_eps, name="attention_norm"
        )
        self.intermediate = keras.layers.Dense(
            config.intermediate_size, kernel_initializer=init, name="intermediate"
        )
        self.output_dense = keras.layers.Dense(hidden, kernel_initializer=init, name="output")
        self.output_norm = keras.layers.LayerNormalization(epsilon=config.layer_norm_eps, name="output_norm")
        self.attention_dropout = keras.layers.Dropout(config.attention_dropout)
        self.dropout = keras.layers.Dropout(config.hidden_dropout)

    def _heads(self, x):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        return ops.reshape(x, (batch, length, self.num_heads, -1))

    def build(self, input_shape):
        for dense in (self.query, self.key, self.value, self.attention_output, self.intermediate):
            dense.build(input_shape)
        self.output_dense.build((*input_shape[:-1], self.intermediate.units))
        self.attention_norm.build(input_shape)
        self.output_norm.build(input_shape)

    def call(self, x, attention=None, training=False):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        if training and self.attention_dropout.rate > 0:  # the fused kernel has no dropout: explicit softmax
            scores = ops.einsum("bqnd,bknd->bnqk", q, k) / ops.sqrt(ops.cast(ops.shape(q)[-1], q.dtype))
            if attention is not None:
                scores = ops.where(
                    attention, scores, ops.cast(-1e4 if scores.dtype == "float16" else -1e9, scores.dtype)
                )
            probs = self.attention_dropout(
                ops.softmax(ops.cast(scores, "float32"), axis=-1), training=training
            )
            context = ops.einsum("bnqk,bknd->bqnd", ops.cast(probs, v.dtype), v)
        else:
            context = ops.dot_product_attention(q, k, v, mask=attention)
        context = ops.reshape(context, (batch, length, -1))
        y = self.dropout(self.attention_output(context), training=training)
        x = self.attention_norm(x + y)
        y = self.dropout(self.output_dense(_gelu(self.intermediate(x))), training=training)
        return self.output_norm(x + y)


class BertEncoder(keras.layers.Layer):
    """Embeddings, ``num_layers`` transformer layers and the pooler (tanh of the [CLS] state)."""

    def __init__(self, config: BertConfig, with_pooler: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        init = _init(config)
        self.word_embeddings = self.add_weight(
            shape=(config.vocab_size, config.hidden_size), initializer=init, name="word_embeddings"
        )
        self.position_embeddings = self.add_weight(
            shape=(config.max_position_embeddings, config.hidden_size),
            initializer=init,
            name="position_embeddings",
        )
        self.token_type_embeddings = self.add_weight(
            shape=(config.type_vocab_size, config.hidden_size), initializer=init, name="token_type_embeddings"
        )
        self.embedding_norm = keras.layers.LayerNormalization(
            epsilon=config.layer_norm_eps, name="embedding_norm"
        )
        self.embedding_dropout = keras.layers.Dropout(config.hidden_dropout)
        self.layers = [TransformerLayer(config, name=f"layer_{i}") for i in range(config.num_layers)]
        self.pooler = (
            keras.layers.Dense(config.hidden_size, activation="tanh", kernel_initializer=init, name="pooler")
            if with_pooler
            else None
        )

    def build(self, input_shape=None):
        hidden = (None, None, self.config.hidden_size)
        self.embedding_norm.build(hidden)
        for layer in self.layers:
            layer.build(hidden)
        if self.pooler is not None:
            self.pooler.build((None, self.config.hidden_size))

    def call(self, input_ids, token_type_ids=None, seq_ids=None, training=False):
        """Hidden states [B, T, H]. ``seq_ids`` (or an attention mask of 1/0) keeps attention within each
        sequence; None lets every token attend to every token."""
        input_ids = ops.cast(input_ids, "int32")
        if token_type_ids is None:
            token_type_ids = ops.zeros_like(input_ids)
        if seq_ids is None:
            positions, attention = ops.arange(ops.shape(input_ids)[1], dtype="int32")[None, :], None
        else:
            seq_ids = ops.cast(seq_ids, "int32")
            positions, attention = packed_position_ids(seq_ids), attention_mask_from_seq_ids(seq_ids)
        x = (
            ops.take(self.word_embeddings, input_ids, axis=0)
            + ops.take(self.position_embeddings, positions, axis=0)
            + ops.take(self.token_type_embeddings, ops.cast(token_type_ids, "int32"), axis=0)
        )
        x = self.embedding_dropout(self.embedding_norm(x), training=training)
        for layer in self.layers:
            x = layer(x, attention=attention, training=training)
        return x

    def pool(self, hidden, cls_positions=None):
        first = hidden[:, 0] if cls_positions is None else gather_positions(hidden, cls_positions)
        return self.pooler(first)


class BertPretrainer(keras.Model):
    """Encoder + masked-LM head (decoder tied to the word embeddings) + next-sentence head.

    ``call(batch)`` takes a dict (input_ids, token_type_ids, seq_ids, mlm_positions, and cls_positions
    with NSP) and returns ``{"mlm_logits": [B, P, V], "nsp_logits": [B, S, 2]}`` (NSP only when
    ``nsp``); without mlm_positions the MLM logits cover every token [B, T, V].
    """

    task = "pretraining"

    def __init__(self, config: BertConfig, nsp: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.config, self.nsp = config, nsp
        init = _init(config)
        self.bert = BertEncoder(config, with_pooler=nsp, name="bert")  # the pooler feeds only NSP
        self.mlm_dense = keras.layers.Dense(config.hidden_size, kernel_initializer=init, name="mlm_dense")
        self.mlm_norm = keras.layers.LayerNormalization(epsilon=config.layer_norm_eps, name="mlm_norm")
        self.mlm_bias = self.add_weight(shape=(config.vocab_size,), initializer="zeros", name="mlm_bias")
        self.nsp_dense = keras.layers.Dense(2, kernel_initializer=init, name="nsp") if nsp else None

    def call(self, batch, training=False):
        hidden = self.bert(
            batch["input_ids"], batch.get("token_type_ids"), batch.get("seq_ids"), training=training
        )
        positions = batch.get("mlm_positions")
        masked = hidden if positions is None else gather_positions(hidden, positions)
        h = self.mlm_norm(_gelu(self.mlm_dense(masked)))
        logits = ops.matmul(h, ops.transpose(ops.cast(self.bert.word_embeddings, h.dtype))) + ops.cast(
            self.mlm_bias, h.dtype
        )
        out = {"mlm_logits": ops.cast(logits, "float32")}
        if self.nsp:
            cls = batch.get("cls_positions")
            pooled = self.bert.pool(hidden, None if cls is None else ops.maximum(cls, 0))
            out["nsp_logits"] = ops.cast(self.nsp_dense(pooled), "float32")
        return out


class BertQuestionAnswering(keras.Model):
    """Encoder + a linear layer giving start and end logits per token (SQuAD)."""

    task = "squad"

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.bert = BertEncoder(config, with_pooler=False, name="bert")
        self.qa = keras.layers.Dense(2, kernel_initializer=_init(config), name="qa")

    def call(self, batch, training=False):
        hidden = self.bert(
            batch["input_ids"], batch.get("token_type_ids"), batch.get("attention_mask"), training=training
        )
        logits = ops.cast(self.qa(hidden), "float32")
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}


def build_pretrainer(config: BertConfig, nsp: bool = False, seq: int = 8) -> BertPretrainer:
    """A pretraining model with its variables created (one call on a dummy batch)."""
    model = BertPretrainer(config, nsp=nsp)
    ids = ops.ones((1, seq), "int32")
    model(
        {
            "input_ids": ids,
            "token_type_ids": ids * 0,
            "seq_ids": ids,
            "mlm_positions": ids[:, :2],
            "cls_positions": ids[:, :1] * 0,
        }
    )
    return model


def build_question_answering(config: BertConfig, seq: int = 8) -> BertQuestionAnswering:
    """A SQuAD model with its variables created."""
    model = BertQuestionAnswering(config)
    ids = ops.ones((1, seq), "int32")
    model({"input_ids": ids, "token_type_ids": ids * 0, "attention_mask": ids})
    return model


def mlm_loss_and_accuracy(mlm_logits, mlm_labels):
    """(mean cross-entropy over real targets, correct count, target count); labels < 0 are padding."""
    labels = ops.cast(mlm_labels, "int32")
    real = ops.cast(labels >= 0, "float32")
    safe = ops.maximum(labels, 0)
    per_token = keras.losses.sparse_categorical_crossentropy(safe, mlm_logits, from_logits=True)
    count = ops.sum(real)
    correct = ops.sum(ops.cast(ops.equal(ops.argmax(mlm_logits, -1), safe), "float32") * real)
    return ops.sum(per_token * real), correct, count


def nsp_loss_sum(nsp_logits, nsp_labels):
    """(summed cross-entropy over real NSP labels, label count); labels < 0 are padding."""
    labels = ops.cast(nsp_labels, "int32")
    real = ops.cast(labels >= 0, "float32")
    per = keras.losses.sparse_categorical_crossentropy(ops.maximum(labels, 0), nsp_logits, from_logits=True)
    return ops.sum(per * real), ops.sum(real)


def dropout_states(model) -> list:
    """The state variables of the model's dropout generators: checkpointed so a resumed run draws the
    masks the unbroken run would have drawn."""
    return [
        layer.seed_generator.state
        for layer in model._flatten_layers()
        if isinstance(layer, keras.layers.Dropout) and getattr(layer, "seed_generator", None) is not None
    ]


def parameter_count(model) -> int:
    return int(sum(int(ops.size(v)) for v in model.trainable_variables))
