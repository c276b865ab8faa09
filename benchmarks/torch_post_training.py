"""The PyTorch pieces of issue 23's post-training speed benchmark (benchmarks/torch_gpu_llama_step.py --lora / --dpo),
in plain torch so that they are tested on the CPU without transformers (benchmarks/torch_post_training_selftest.py).

- LoRA, written by hand (no peft library on the GPU machine): `apply_lora` wraps every `q_proj` and `v_proj` linear
  of a model (Llama's attention names) in `LoraLinear`, y = W x + (alpha / rank) B A x, A [rank, in] drawn from
  normal(0, std), B [out, rank] zero (fast-llm's rule: the adapted model starts as the base model), and freezes every
  other parameter (requires_grad False: autograd computes no weight gradient for them and the optimizer holds no
  state). Dropout 0, as the benchmark's fast-llm config.
- DPO, TRL's sigmoid loss over the answers' spans: each preference document (prompt + chosen + EOS, then BOS + prompt
  + rejected + EOS, docs/post-training.md) is scored as two rows, its chosen and its rejected sequence, as TRL scores
  a pair and as fast-llm's batch cuts the document into two attention segments where the chosen span ends. A row's
  log-probability of its answer is the sum over the span's tokens t of log p(token t | tokens before t), read from
  the logits of position t - 1; the loss is the mean over the pairs of -log sigmoid(beta ((pi_c - ref_c) -
  (pi_r - ref_r))). With TRL's `use_logits_to_keep` (off by default there; --logits-to-keep here) the models compute
  the logits of the last `logits_to_keep(mask)` positions only, those from the position before the batch's first
  span token on.
"""
import torch


class LoraLinear(torch.nn.Module):
    """A frozen linear layer with a trained low-rank adapter: y = base(x) + scale x A^T B^T."""

    def __init__(self, base, rank, alpha, std=0.02, generator=None):
        super().__init__()
        self.base = base
        self.scale = alpha / rank
        weight = base.weight
        a = torch.randn((rank, base.in_features), generator=generator, dtype=torch.float32) * std
        self.lora_a = torch.nn.Parameter(a.to(device=weight.device, dtype=weight.dtype))
        self.lora_b = torch.nn.Parameter(torch.zeros((base.out_features, rank), device=weight.device,
                                                     dtype=weight.dtype))

    def forward(self, x):
        adapter = torch.nn.functional.linear(torch.nn.functional.linear(x, self.lora_a), self.lora_b)
        return self.base(x) + self.scale * adapter


def apply_lora(model, rank, alpha, targets=("q_proj", "v_proj"), std=0.02, seed=0):
    """Freezes every parameter of `model` and wraps each linear child named in `targets` in a LoraLinear (A from a
    CPU generator seeded with `seed`, so the adapters do not depend on the device). Returns the adapters' parameters
    (the only ones that require a gradient); raises when the model has no such linear."""
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    generator = torch.Generator().manual_seed(seed)
    wrapped = []
    for _, module in list(model.named_modules()):
        for name in targets:
            child = getattr(module, name, None)
            if isinstance(child, torch.nn.Linear):
                adapter = LoraLinear(child, rank, alpha, std=std, generator=generator)
                setattr(module, name, adapter)
                wrapped.append(adapter)
    if not wrapped:
        raise ValueError(f"the model has no linear layer named {', '.join(targets)} to adapt")
    return [parameter for adapter in wrapped for parameter in (adapter.lora_a, adapter.lora_b)]


def preference_rows(documents, chosen, rejected):
    """The two rows of each preference document, cut where its chosen span ends, with each row's answer span:
    ([chosen rows..., rejected rows...], [their (begin, end) spans]); the chosen rows come first, in document order."""
    chosen_rows, chosen_spans, rejected_rows, rejected_spans = [], [], [], []
    for document, (chosen_begin, chosen_end), (rejected_begin, rejected_end) in zip(documents, chosen, rejected):
        if not 0 < chosen_begin < chosen_end <= rejected_begin < rejected_end <= len(document):
            raise ValueError(f"spans {(chosen_begin, chosen_end)} / {(rejected_begin, rejected_end)} do not fit a "
                             f"preference document of {len(document)} tokens")
        chosen_rows.append(list(document[:chosen_end]))
        chosen_spans.append((chosen_begin, chosen_end))
        rejected_rows.append(list(document[chosen_end:]))
        rejected_spans.append((rejected_begin - chosen_end, rejected_end - chosen_end))
    return chosen_rows + rejected_rows, chosen_spans + rejected_spans


def span_mask(spans, length, device=None):
    """Boolean [rows, length]: position t of row r is in r's span [begin, end). A span must start after position 0
    (its first token needs a previous position to be predicted from)."""
    positions = torch.arange(length, device=device)
    begins = torch.tensor([begin for begin, _ in spans], device=device)
    ends = torch.tensor([end for _, end in spans], device=device)
    if bool((begins < 1).any()) or bool((ends > length).any()):
        raise ValueError(f"spans {spans} do not fit rows of {length} tokens after position 0")
    return (positions[None, :] >= begins[:, None]) & (positions[None, :] < ends[:, None])


def span_log_probability_sums(logits, tokens, mask):
    """Per row, the sum over the positions t in `mask` of log p(tokens[t] | logits[t - 1]), in fp32 at least (fp64
    logits stay fp64). logits [rows, length, vocab], tokens [rows, length], mask [rows, length] bool."""
    rows, length, vocab = logits.shape
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    # Position t's target is token t + 1; the last position gets a dummy target (dropped below), so the logits are
    # read whole, without a copy of all but their last position.
    targets = torch.cat([tokens[:, 1:], tokens[:, :1]], dim=1)
    per_token = -torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), reduction="none")
    return (per_token.view(rows, length)[:, :-1] * mask[:, 1:]).sum(-1)


def logits_to_keep(mask):
    """TRL's count of last positions whose logits the span sums read: from the position before the batch's first span
    token to the end. mask [rows, length] bool, as span_mask's."""
    first = int(mask.nonzero(as_tuple=True)[1].min())
    return mask.shape[1] - first + 1


def dpo_sigmoid_loss(policy_sums, reference_sums, beta):
    """TRL's sigmoid DPO loss: rows [0, pairs) hold the chosen answers' log-probabilities, rows [pairs, 2 pairs) the
    rejected ones' of the same pairs; the mean over the pairs."""
    pairs = policy_sums.shape[0] // 2
    if policy_sums.shape[0] != 2 * pairs or reference_sums.shape != policy_sums.shape:
        raise ValueError(f"needs 2 x pairs rows on both sides, got {tuple(policy_sums.shape)} and "
                         f"{tuple(reference_sums.shape)}")
    chosen = policy_sums[:pairs] - reference_sums[:pairs]
    rejected = policy_sums[pairs:] - reference_sums[pairs:]
    return -torch.nn.functional.logsigmoid(beta * (chosen - rejected)).mean()
