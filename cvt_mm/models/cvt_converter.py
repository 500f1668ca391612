"""CvT's checkpoint layouts and how each is renamed into ours (registered with
:mod:`cvt_mm.checkpoint.formats`, recognised by their keys): the official microsoft/CvT
model-zoo files, Hugging Face ``CvtForImageClassification`` files, and this project's own.
"""
from ..checkpoint.formats import (
    StateDict,
    WeightFormat,
    has_key_matching,
    regex_rename,
    register_format,
)


# Ours = the official keys with ``stage{i}.`` renamed to ``stages.{i}.``:
#   stages.{i}.patch_embed.proj / .norm           (token embedding: Conv2d, LayerNorm)
#   stages.{i}.blocks.{j}.norm1 / .norm2
#   stages.{i}.blocks.{j}.attn.conv_proj_{q,k,v}.conv / .bn, .attn.proj_{q,k,v}, .attn.proj
#   stages.{i}.blocks.{j}.mlp.fc1 / .fc2
#   stages.2.cls_token, norm, head                (the classification stage)
#   out_norms.{i}                                 (ours only: optional norms for dense heads)
def _cvt_official_to_ours(sd: StateDict) -> StateDict:
    return regex_rename(sd, [(r'^stage(\d+)\.', r'stages.\1.')])


# Hugging Face CvtForImageClassification (``cvt.`` is absent in a bare CvtModel file).
_HF_STAGE = r'^(?:cvt\.)?encoder\.stages\.(\d+)\.'
_HF_BLOCK = _HF_STAGE + r'layers\.(\d+)\.'
_CVT_HF_RULES = [
    (_HF_STAGE + r'embedding\.convolution_embeddings\.projection\.',
     r'stages.\1.patch_embed.proj.'),
    (_HF_STAGE + r'embedding\.convolution_embeddings\.normalization\.',
     r'stages.\1.patch_embed.norm.'),
    (_HF_STAGE + r'cls_token$', r'stages.\1.cls_token'),
]
for _long, _short in (('query', 'q'), ('key', 'k'), ('value', 'v')):
    _conv = _HF_BLOCK + rf'attention\.attention\.convolution_projection_{_long}\.' \
        r'convolution_projection\.'
    _CVT_HF_RULES += [
        (_conv + r'convolution\.', rf'stages.\1.blocks.\2.attn.conv_proj_{_short}.conv.'),
        (_conv + r'normalization\.', rf'stages.\1.blocks.\2.attn.conv_proj_{_short}.bn.'),
        (_HF_BLOCK + rf'attention\.attention\.projection_{_long}\.',
         rf'stages.\1.blocks.\2.attn.proj_{_short}.'),
    ]
_CVT_HF_RULES += [
    (_HF_BLOCK + r'attention\.output\.dense\.', r'stages.\1.blocks.\2.attn.proj.'),
    (_HF_BLOCK + r'layernorm_before\.', r'stages.\1.blocks.\2.norm1.'),
    (_HF_BLOCK + r'layernorm_after\.', r'stages.\1.blocks.\2.norm2.'),
    (_HF_BLOCK + r'intermediate\.dense\.', r'stages.\1.blocks.\2.mlp.fc1.'),
    (_HF_BLOCK + r'output\.dense\.', r'stages.\1.blocks.\2.mlp.fc2.'),
    (r'^layernorm\.', 'norm.'),
    (r'^classifier\.', 'head.'),
]


register_format(WeightFormat(
    'cvt-official', 'cvt', has_key_matching(r'stage0\.patch_embed\.proj\.weight$'),
    _cvt_official_to_ours, 'microsoft/CvT model-zoo .pth (a plain state dict)'))
register_format(WeightFormat(
    'cvt-huggingface', 'cvt',
    has_key_matching(_HF_STAGE + r'embedding\.convolution_embeddings\.projection\.weight$'),
    lambda sd: regex_rename(sd, _CVT_HF_RULES),
    'Hugging Face transformers CvtForImageClassification / CvtModel'))
register_format(WeightFormat(
    # Keyed on the convolutional projection, which CMT's layout (also `stages.{i}.`) lacks.
    'cvt-ours', 'cvt', has_key_matching(r'stages\.0\.blocks\.0\.attn\.conv_proj_q\.conv\.weight$'),
    dict,
    "this project's layout (CvT().state_dict())"))
