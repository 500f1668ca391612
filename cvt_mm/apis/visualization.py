"""Drawing a detector's predictions at a readable size.

The demo's images are 128 px: boxes, labels and masks drawn at that size cannot be read. These
helpers run the model on exactly what evaluation feeds it and paste only its output at a
multiple of the original size.
"""
import torch


def predict_upsampled(model, data: dict, factor: int = 1):
    """Predict one test-pipeline sample with the result pasted at ``factor`` times the
    original image size.

    MMDetection's postprocessing maps boxes back to ``ori_shape`` through ``scale_factor``
    and pastes each mask from the mask head's 28x28 output at that size, so changing those
    two entries of the metainfo gives smooth masks at the larger size, while the model's input
    stays the one evaluation uses.

    Args:
        model: an MMDetection detector.
        data (dict): one output of the config's test pipeline (``inputs``, ``data_samples``).
        factor (int): the drawing size over the original size. Defaults to 1.

    Returns:
        DetDataSample: the prediction, with ``ori_shape`` the upsampled size.

    Raises:
        ValueError: ``factor`` is not an integer >= 1.

    Example (``tools/analysis_tools/prediction_grid.py`` runs this on a trained detector;
    ``model`` from ``mmdet.apis.init_detector``)::

        from mmcv.transforms import Compose
        from mmdet.utils import get_test_pipeline_cfg

        pipeline = Compose(get_test_pipeline_cfg(model.cfg))
        result = predict_upsampled(model, pipeline(dict(img_path='a.jpg', img_id=0)), factor=3)
    """
    if not isinstance(factor, int) or factor < 1:
        raise ValueError(f'factor must be an integer >= 1, got {factor!r}')
    sample = data['data_samples']
    height, width = sample.ori_shape
    scale_w, scale_h = sample.scale_factor
    sample.set_metainfo(dict(ori_shape=(height * factor, width * factor),
                             scale_factor=(scale_w / factor, scale_h / factor)))
    with torch.no_grad():
        return model.test_step(dict(inputs=[data['inputs']], data_samples=[sample]))[0]


def best_predictions(instances, score_thr: float, max_count: int):
    """The best predictions, best first: at most ``max_count`` of those scoring ``score_thr``
    or more.

    Args:
        instances (InstanceData): predictions with ``scores`` (``pred_instances``).
        score_thr (float): the lowest score kept.
        max_count (int): how many at most.

    Returns:
        InstanceData: the kept predictions, by descending score.

    Example::

        >>> from mmengine.structures import InstanceData
        >>> best_predictions(InstanceData(scores=torch.tensor([0.3, 0.9, 0.6, 0.8])),
        ...                  score_thr=0.5, max_count=2).scores
        tensor([0.9000, 0.8000])
    """
    instances = instances[instances.scores >= score_thr]
    return instances[instances.scores.argsort(descending=True)[:max_count]]


def enlarge_labels(visualizer, factor: float) -> None:
    """Draw every label of ``visualizer`` ``factor`` times larger.

    MMDetection's visualizer sizes a label 6-13 px by its box's area, whatever the picture's
    size: once a grid of upsampled images is shrunk to fit a page, that is unreadable.

    Args:
        visualizer: an MMEngine ``Visualizer`` (e.g. ``DetLocalVisualizer``); its
            ``draw_texts`` is wrapped in place.
        factor (float): the font size multiplier, > 0.

    Raises:
        ValueError: ``factor`` is not > 0.
    """
    if factor <= 0:
        raise ValueError(f'factor must be > 0, got {factor}')
    draw_texts = visualizer.draw_texts

    def draw_larger_texts(*args, font_sizes=None, **kwargs):
        if isinstance(font_sizes, (int, float)):
            font_sizes = round(font_sizes * factor)
        elif font_sizes is not None:
            font_sizes = [round(size * factor) for size in font_sizes]
        return draw_texts(*args, font_sizes=font_sizes, **kwargs)

    visualizer.draw_texts = draw_larger_texts
