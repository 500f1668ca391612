"""The published checkpoint layouts, written out from our keys in the other direction than
the loaders read them (from the official key lists and transformers' modeling_cvt names), so
that a test can store a model in any layout users download; and weights random enough that a
tensor loaded into the wrong place shows."""
import re

import torch


def randomized(model):
    """Every parameter and BatchNorm statistic of ``model`` random (seeded); ``model`` in eval
    mode."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if name.endswith('num_batches_tracked'):
                continue
            if name.endswith('running_var'):
                t.copy_(torch.rand(t.shape, generator=g) + 0.5)
            else:
                t.copy_(torch.randn(t.shape, generator=g) * 0.2)
    return model.eval()


def cvt_to_official(sd):
    """Our CvT keys -> microsoft/CvT's (``stages.{i}.`` -> ``stage{i}.``)."""
    return {re.sub(r'^stages\.(\d+)\.', r'stage\1.', k): v for k, v in sd.items()}


# Hugging Face transformers' modeling_cvt names, written out in the other direction.
_HF_BLOCK_PARTS = [
    ('norm1.', 'layernorm_before.'), ('norm2.', 'layernorm_after.'),
    ('mlp.fc1.', 'intermediate.dense.'), ('mlp.fc2.', 'output.dense.'),
    ('attn.proj.', 'attention.output.dense.'),
] + [(f'attn.conv_proj_{s}.conv.', f'attention.attention.convolution_projection_{n}.'
      'convolution_projection.convolution.') for s, n in (('q', 'query'), ('k', 'key'),
                                                          ('v', 'value'))] \
  + [(f'attn.conv_proj_{s}.bn.', f'attention.attention.convolution_projection_{n}.'
      'convolution_projection.normalization.') for s, n in (('q', 'query'), ('k', 'key'),
                                                            ('v', 'value'))] \
  + [(f'attn.proj_{s}.', f'attention.attention.projection_{n}.')
     for s, n in (('q', 'query'), ('k', 'key'), ('v', 'value'))]


def cvt_to_huggingface(sd):
    """Our CvT keys -> Hugging Face ``CvtForImageClassification``'s."""
    out = {}
    for key, value in sd.items():
        m = re.match(r'stages\.(\d+)\.blocks\.(\d+)\.(.*)$', key)
        if m:
            rest = next(hf + m.group(3)[len(ours):] for ours, hf in _HF_BLOCK_PARTS
                        if m.group(3).startswith(ours))
            key = f'cvt.encoder.stages.{m.group(1)}.layers.{m.group(2)}.{rest}'
        elif key.startswith('norm.'):
            key = 'layernorm.' + key[len('norm.'):]
        elif key.startswith('head.'):
            key = 'classifier.' + key[len('head.'):]
        else:
            key = re.sub(r'^stages\.(\d+)\.patch_embed\.proj\.',
                         r'cvt.encoder.stages.\1.embedding.convolution_embeddings.projection.', key)
            key = re.sub(r'^stages\.(\d+)\.patch_embed\.norm\.',
                         r'cvt.encoder.stages.\1.embedding.convolution_embeddings.normalization.',
                         key)
            key = re.sub(r'^stages\.(\d+)\.cls_token$', r'cvt.encoder.stages.\1.cls_token', key)
        out[key] = value.clone()
    return out


def cmt_official_key(key):
    """Our key -> official huawei-noah key (written from the official key list)."""
    letters = 'abcd'
    m = re.match(r'stem\.(\d)\.(conv|bn)\.(.*)', key)
    if m:
        kind = 'conv' if m.group(2) == 'conv' else 'norm'
        return f'stem_{kind}{int(m.group(1)) + 1}.{m.group(3)}'
    m = re.match(r'stages\.(\d)\.(.*)', key)
    if m:
        letter, rest = letters[int(m.group(1))], m.group(2)
        if rest == 'relative_pos':
            return f'relative_pos_{letter}'
        if rest.startswith('patch_embed.'):
            return f'patch_embed_{letter}.{rest[len("patch_embed."):]}'
        j, rest = re.match(r'blocks\.(\d+)\.(.*)', rest).groups()
        for ours, theirs in (('lpu.', 'proj.'), ('attn.sr.conv.', 'attn.sr.0.'),
                             ('attn.sr.bn.', 'attn.sr.1.'), ('ffn.conv1.conv.', 'mlp.conv1.0.'),
                             ('ffn.conv1.bn.', 'mlp.conv1.2.'), ('ffn.dwconv_bn.', 'mlp.proj_bn.'),
                             ('ffn.dwconv.', 'mlp.proj.'), ('ffn.conv2.conv.', 'mlp.conv2.0.'),
                             ('ffn.conv2.bn.', 'mlp.conv2.1.')):
            if rest.startswith(ours):
                rest = theirs + rest[len(ours):]
                break
        return f'blocks_{letter}.{j}.{rest}'
    return key.replace('cls_proj.conv.', '_fc.').replace('cls_proj.bn.', '_bn.')


def cmt_to_official(sd):
    """Our CMT keys -> huawei-noah cmt_pytorch's."""
    return {cmt_official_key(k): v for k, v in sd.items()}
