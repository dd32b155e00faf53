# A follow-up to run 30 (docs/bench/fused-projections-zen4/results.txt).
"""A/B on the fused target: (R) as loaded (the rotary over the query and key heads at once, run 30's
follow-up), (F) the fused forward before it (the projections split, transformers' apply_rotary_pos_emb on
each)."""
import sys, types
import torch
from transformers.models.llama.modeling_llama import ALL_ATTENTION_FUNCTIONS, apply_rotary_pos_emb, eager_attention_forward
from interleaved import logit_diffs, verify_ab
from talon.models.registry import ModelRegistry
torch.set_num_threads(2)
target = ModelRegistry().get("embedded"); model = target.model
attns = [m for m in model.modules() if "fused_qkv" in vars(m)]
orig = {id(a): a.forward for a in attns}

def fwd(self, hidden_states, position_embeddings=None, attention_mask=None, past_key_values=None, **kwargs):
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    query, key, value = (t.view(hidden_shape).transpose(1, 2) for t in self.fused_qkv(hidden_states))
    query, key = apply_rotary_pos_emb(query, key, *position_embeddings)
    if past_key_values is not None:
        key, value = past_key_values.update(key, value, self.layer_idx)
    attention = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
    o, w = attention(self, query, key, value, attention_mask, dropout=0.0, scaling=self.scaling, **kwargs)
    return self.o_proj(o.reshape(*input_shape, -1).contiguous()), w


def setv(v):
    for a in attns:
        a.forward = types.MethodType(fwd, a) if v == "F" else orig[id(a)]
logit_diffs(target, setv, "FR")
verify_ab(target, setv, "FR", [1, 4, 16], int(sys.argv[1]), restore="R")
