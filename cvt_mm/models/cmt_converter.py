"""CMT's checkpoint layouts and how each is renamed into ours (registered with
:mod:`cvt_mm.checkpoint.formats`, recognised by their keys): the official huawei-noah
``cmt_pytorch`` files, and this project's own.
"""
from ..checkpoint.formats import WeightFormat, has_key_matching, regex_rename, register_format

# Official (stage letters a-d)          -> ours (stage index 0-3)
#   stem_conv{n} / stem_norm{n}          -> stem.{n-1}.conv / stem.{n-1}.bn
#   patch_embed_{l}.proj / .norm         -> stages.{i}.patch_embed.proj / .norm
#   relative_pos_{l}                     -> stages.{i}.relative_pos
#   blocks_{l}.{j}.proj (LPU)            -> stages.{i}.blocks.{j}.lpu
#   blocks_{l}.{j}.attn.sr.0 / .sr.1     -> stages.{i}.blocks.{j}.attn.sr.conv / .sr.bn
#   blocks_{l}.{j}.mlp.conv1.0 / .2      -> stages.{i}.blocks.{j}.ffn.conv1.conv / .bn
#   blocks_{l}.{j}.mlp.proj / .proj_bn   -> stages.{i}.blocks.{j}.ffn.dwconv / .dwconv_bn
#   blocks_{l}.{j}.mlp.conv2.0 / .1      -> stages.{i}.blocks.{j}.ffn.conv2.conv / .bn
#   blocks_{l}.{j}.{norm1,norm2,attn.*}  -> stages.{i}.blocks.{j}.{same}
#   _fc / _bn / head                     -> cls_proj.conv / cls_proj.bn / head
# Ours only: out_norms.{i} (optional norms for dense heads).
_CMT_STAGE_LETTERS = 'abcd'
_CMT_BLOCK = r'^blocks_([a-d])\.(\d+)\.'


def _cmt_stage(sub: str):
    """``re.sub`` replacement: stage letter (group 1) -> ``stages.{i}.`` + ``sub`` formatted
    with the match groups (``{1}`` = block index)."""
    return lambda m: f'stages.{_CMT_STAGE_LETTERS.index(m.group(1))}.' + sub.format(*m.groups())


_CMT_RULES = [(_CMT_BLOCK + old, _cmt_stage('blocks.{1}.' + new)) for old, new in (
    (r'proj\.', 'lpu.'),
    (r'attn\.sr\.0\.', 'attn.sr.conv.'),
    (r'attn\.sr\.1\.', 'attn.sr.bn.'),
    (r'mlp\.conv1\.0\.', 'ffn.conv1.conv.'),
    (r'mlp\.conv1\.2\.', 'ffn.conv1.bn.'),
    (r'mlp\.proj\.', 'ffn.dwconv.'),
    (r'mlp\.proj_bn\.', 'ffn.dwconv_bn.'),
    (r'mlp\.conv2\.0\.', 'ffn.conv2.conv.'),
    (r'mlp\.conv2\.1\.', 'ffn.conv2.bn.'),
    ('', ''),  # norm1, norm2, attn.{q,k,v,proj}: same names
)] + [
    (r'^stem_conv(\d)\.', lambda m: f'stem.{int(m.group(1)) - 1}.conv.'),
    (r'^stem_norm(\d)\.', lambda m: f'stem.{int(m.group(1)) - 1}.bn.'),
    (r'^patch_embed_([a-d])\.', _cmt_stage('patch_embed.')),
    (r'^relative_pos_([a-d])$', _cmt_stage('relative_pos')),
    (r'^_fc\.', 'cls_proj.conv.'),
    (r'^_bn\.', 'cls_proj.bn.'),
]


register_format(WeightFormat(
    'cmt-official', 'cmt', has_key_matching(r'relative_pos_a$'),
    lambda sd: regex_rename(sd, _CMT_RULES),
    'huawei-noah/Efficient-AI-Backbones cmt_pytorch (a plain state dict or {"model": ...})'))
register_format(WeightFormat(
    'cmt-ours', 'cmt', has_key_matching(r'stages\.0\.relative_pos$'), dict,
    "this project's layout (CMT().state_dict())"))
