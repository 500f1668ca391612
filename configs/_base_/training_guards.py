# The training guards of every training config of ours, named here so that a printed config
# shows what runs (docs/cluster.md): FiniteLossHook stops at a non-finite loss before the
# optimizer step; ExactResumeHook saves every rank's generators and data position with each
# checkpoint (ExactResumeRunner gives them back on resume); PreemptionHook turns SIGTERM/SIGUSR1
# into a checkpoint at the next iteration and exit code 75. ExactResumeRunner adds any of them
# a config leaves out, and its log says which.
#
# The schedule bases (`schedules/`), the ImageNet recipe and the configs built on a whole
# toolbox config inherit it. A config with hooks of its own keeps the guards by listing them:
#
#     custom_hooks = [*_base_.training_guards, dict(type='EMAHook', momentum=4e-5)]
#
# (`training_guards` is a key of its own because a config's `custom_hooks` replaces its base's
# list, EMA hook and all.)
runner_type = 'ExactResumeRunner'
training_guards = [
    dict(type='FiniteLossHook'),
    dict(type='ExactResumeHook'),
    dict(type='PreemptionHook'),
]
custom_hooks = training_guards
