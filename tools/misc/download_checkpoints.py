"""Download the published CvT and CMT ImageNet checkpoints under the names the configs expect.

    python tools/misc/download_checkpoints.py --list               # what is known, and where
    python tools/misc/download_checkpoints.py --list --markdown    # docs/checkpoints.md's table
    python tools/misc/download_checkpoints.py cvt-13 cmt-small     # into checkpoints/
    python tools/misc/download_checkpoints.py 'cmt-*' --out /data/checkpoints
    python tools/misc/download_checkpoints.py '*' --base-url https://mirror.example.org

Names are those of ``--list`` (or the file names, e.g. ``cmt_small.pth``); shell-style globs
select several. Each file goes to ``--out`` under the name the configs use
(``checkpoints/CvT-13-224x224-IN-1k.pth``, ``checkpoints/cmt_small.pth``, ...), downloaded
atomically (never half a file under that name), checked against its SHA-256 where the project
knows it, then read once to check it is a checkpoint of the right family. A file already there
is kept (and checked); ``--force`` downloads it again.

CMT: the authors' files, from the ggjy/CMT.pytorch GitHub release. CvT: the authors' files are
in a OneDrive folder that offers no direct download link, so the tool fetches Hugging Face's
conversions of the same weights (``microsoft/cvt-*``, ``pytorch_model.bin``) and saves them as
published; the CvT loader reads that layout as it is
(``tools/model_converters/convert_weights.py`` rewrites it
in ours if wanted). For the authors' own files, download them by hand from the OneDrive link
the tool prints and save them under the same names.

``--base-url`` (or ``$CVT_MM_CHECKPOINT_BASE_URL``) replaces scheme and host of every URL, for
a mirror that keeps the hosts' paths: ``<base>/ggjy/CMT.pytorch/releases/download/release-v1/
cmt_small.pth``, ``<base>/microsoft/cvt-13/resolve/main/pytorch_model.bin``.
"""
import argparse
import fnmatch
import os
import sys
import urllib.parse
from typing import List, Optional

from cvt_mm import checkpoint
from cvt_mm.checkpoint import hub

BASE_URL_ENV = 'CVT_MM_CHECKPOINT_BASE_URL'


def parse_args(argv=None):
    names = ', '.join(p.name for p in checkpoint.PUBLISHED)
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0],
        epilog=f'known names: {names}. See docs/checkpoints.md.')
    parser.add_argument('names', nargs='*', metavar='NAME',
                        help="checkpoints to download: names or file names from --list, or "
                        "globs ('cmt-*', '*-22k', '*' for all)")
    parser.add_argument('--list', action='store_true',
                        help='print the table of known checkpoints (those NAMEs select, '
                        'else all) and exit')
    parser.add_argument('--markdown', action='store_true',
                        help="with --list: the table in Markdown (docs/checkpoints.md's)")
    parser.add_argument('--out', default='checkpoints',
                        help='folder the files go to (default: checkpoints, where the '
                        'configs look)')
    parser.add_argument('--base-url', default=os.environ.get(BASE_URL_ENV) or None,
                        help='download from this host instead (a mirror keeping the '
                        f'original paths); default: ${BASE_URL_ENV} if set')
    parser.add_argument('--force', action='store_true',
                        help='download again files already in --out')
    parser.add_argument('--no-progress', action='store_true',
                        help='no progress bar (there is none anyway when stderr is not a '
                        'terminal)')
    args = parser.parse_args(argv)
    if args.base_url is not None and not hub.is_url(args.base_url):
        parser.error(f'--base-url must start with http:// or https://, got {args.base_url!r}')
    if args.markdown and not args.list:
        parser.error('--markdown goes with --list (it formats the table)')
    if not args.names and not args.list:
        parser.error(f"name the checkpoints to download (or '*' for all, --list to see them); "
                     f'known: {names}')
    try:
        args.entries = select(args.names)
    except ValueError as err:
        parser.error(str(err))
    return args


def select(patterns: List[str]) -> List[checkpoint.PublishedCheckpoint]:
    """The rows of ``checkpoint.PUBLISHED`` that ``patterns`` name (all for no pattern), in table
    order; a pattern that matches nothing raises ``ValueError`` naming the allowed values."""
    if not patterns:
        return list(checkpoint.PUBLISHED)
    chosen = set()
    for pattern in patterns:
        low = pattern.lower()
        hits = [p for p in checkpoint.PUBLISHED
                if fnmatch.fnmatchcase(p.name, low) or fnmatch.fnmatchcase(p.filename.lower(), low)]
        if not hits:
            raise ValueError(f'{pattern!r} matches no published checkpoint; allowed: '
                             + ', '.join(p.name for p in checkpoint.PUBLISHED)
                             + " (or their file names, or globs such as 'cmt-*')")
        chosen.update(p.name for p in hits)
    return [p for p in checkpoint.PUBLISHED if p.name in chosen]


def effective_url(url: str, base_url: Optional[str]) -> str:
    """``url`` with its scheme and host replaced by ``base_url`` (which may carry a path
    prefix); ``url`` itself without a base."""
    if not base_url:
        return url
    parts = urllib.parse.urlsplit(url)
    return base_url.rstrip('/') + parts.path + (f'?{parts.query}' if parts.query else '')


def format_table(entries: List[checkpoint.PublishedCheckpoint], out: str,
                 base_url: Optional[str]) -> str:
    """The ``--list`` table: one row per checkpoint, columns aligned."""
    header = ('name', 'file', 'input', 'top-1', 'pretrain', 'licence', 'sha256', 'url')
    rows = [header] + [(p.name, os.path.join(out, p.filename), str(p.input_size),
                        f'{p.top1:.1f}', p.pretrain, p.licence, p.sha256 or 'unknown',
                        effective_url(p.url, base_url)) for p in entries]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = ['  '.join(cell.ljust(w) for cell, w in zip(row, widths)) + '  ' + row[-1]
             for row in rows]
    manual = sorted({p.manual for p in entries if p.manual})
    for link in manual:
        lines.append(f"\nCvT: the authors' own files are in a OneDrive folder without direct "
                     f'links ({link}); the URLs above are Hugging Face\'s conversions of the '
                     'same weights, which the loader reads as they are.')
    return '\n'.join(lines)


def markdown_table(entries) -> str:
    """The table of docs/checkpoints.md (``--list --markdown``);
    tests/test_checkpoint/test_hub.py checks that the page carries exactly this."""
    pretrain = {'IN-1k': 'ImageNet-1k', 'IN-22k': 'ImageNet-22k, fine-tuned on 1k'}
    lines = ['| name | file under `checkpoints/` | input | top-1 (%) | pretrained on | '
             'licence | sha256 | download URL |',
             '|---|---|---|---|---|---|---|---|']
    for p in entries:
        sha = f'`{p.sha256}`' if p.sha256 else 'unknown'
        lines.append(f'| `{p.name}` | `{p.filename}` | {p.input_size} | {p.top1:.1f} | '
                     f'{pretrain.get(p.pretrain, p.pretrain)} | {p.licence} | {sha} | '
                     f'<{p.url}> |')
    return '\n'.join(lines)


def check_file(path: str, entry: checkpoint.PublishedCheckpoint) -> str:
    """Read ``path`` as ``init_cfg`` would and name its layout; raise CheckpointError when it
    is no checkpoint of ``entry``'s family."""
    sd, _ = checkpoint.extract_state_dict(checkpoint.read_checkpoint(path, entry.family))
    return checkpoint.detect_format(sd, entry.family).name


def fetch(entry: checkpoint.PublishedCheckpoint, out: str, base_url: Optional[str],
          force: bool, progress: Optional[bool]) -> str:
    """Download one checkpoint into ``out``; returns a one-line report. Raises
    ``CheckpointError`` (``hub.DownloadError`` for the download itself) on failure."""
    dst = os.path.join(out, entry.filename)
    url = effective_url(entry.url, base_url)
    if os.path.isfile(dst) and not force:
        if entry.sha256:
            found = hub.sha256_of(dst)
            if found != entry.sha256 and entry.manual:
                # likely the authors' own file, saved by hand from OneDrive: not an error
                return (f"{dst}: already there, not the file at {url} (SHA-256 {found}); "
                        "kept (the authors' own file? --force replaces it)")
            if found != entry.sha256:
                raise checkpoint.CheckpointError(
                    f'{dst} is already there but its SHA-256 is {found}, not the published '
                    f'{entry.sha256}: --force downloads it again (from {url}).')
            return f'{dst}: already there, SHA-256 matches'
        return f'{dst}: already there (kept; --force downloads it again)'
    # Under a temporary name until it proved to be a checkpoint of the family: a mirror
    # serving something else never replaces a good file where the configs look.
    unchecked = f'{dst}.{os.getpid()}.unchecked'
    try:
        hub.download(url, unchecked, sha256=entry.sha256, progress=progress)
        try:
            layout = check_file(unchecked, entry)
        except checkpoint.CheckpointError as err:
            raise checkpoint.CheckpointError(
                f'{url} is not a {entry.family} checkpoint: {err}. Nothing was saved under '
                f'{dst}.') from err
        os.replace(unchecked, dst)
    finally:
        if os.path.exists(unchecked):
            os.remove(unchecked)
    size = os.path.getsize(dst) / 2**20
    if entry.sha256:
        checked = 'SHA-256 verified'
    else:
        checked = (f'sha256 {hub.sha256_of(dst)} (the project knows no hash for this file to '
                   'compare with)')
    return f'{dst}: {size:.1f} MiB from {url}, layout {layout}, {checked}'


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list:
        print(markdown_table(args.entries) if args.markdown
              else format_table(args.entries, args.out, args.base_url))
        return 0
    progress = False if args.no_progress else None
    manual = {p.manual for p in args.entries if p.manual}
    for link in sorted(manual):
        print(f"note: the CvT authors' files are in a OneDrive folder ({link}) that has no "
              "direct download link, so Hugging Face's conversions of the same weights are "
              'downloaded instead and saved under the official names. For the authors\' own '
              'files, download them by hand from that link and save them under the same '
              'names.', flush=True)
    failed = []
    for entry in args.entries:
        try:
            print(fetch(entry, args.out, args.base_url, args.force, progress), flush=True)
        except checkpoint.CheckpointError as err:  # hub.DownloadError is one too
            print(f'error: {entry.name}: {err}', file=sys.stderr, flush=True)
            failed.append(entry.name)
    if failed:
        print(f'{len(failed)} of {len(args.entries)} checkpoints failed: {", ".join(failed)}',
              file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
