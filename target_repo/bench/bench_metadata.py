"""Per-step metadata preparation time.

* `metadata_ms`: `init_forward_metadata_replay_cuda_graph` for one step of every graph mode
  (decode, local attention, draft topk 1, draft topk 4, target verify, encoder-decoder),
  and `metadata_<mode>_ms` for each of them;
* `eager_metadata_ms`: `init_forward_metadata` for one decode batch and one extend batch.
"""

import torch

from _common import BenchWorld, emit, parse_args, time_ms

REPLAY_BS = 16
EAGER_DECODE_BS = 32
EAGER_EXTEND_BS = 8

GRAPH_MODES = {
    "decode": ("decode", {}),
    "local": ("decode", {"attention_chunk_size": 256}),
    "draft_topk1": ("draft", {"topk": 1, "speculative_num_steps": 4, "speculative_step_id": 2}),
    "draft_topk4": ("draft", {"topk": 4, "speculative_num_steps": 4, "speculative_step_id": 2}),
    "verify": ("verify", {"speculative_num_draft_tokens": 4}),
    "encoder": ("decode", {"is_encoder_decoder": True, "max_encoder_len": 256}),
}


def replay_step(world, batch):
    be = world.backend
    n_tok = batch.num_tokens // batch.batch_size
    be.init_cuda_graph_state(batch.batch_size, batch.batch_size * n_tok)
    # capture with a graph runner's placeholder inputs (padding request 0, length 1)
    bs = batch.batch_size
    placeholder = torch.zeros(bs, dtype=torch.int64, device=world.device)
    enc = None if batch.encoder_lens is None else torch.ones_like(batch.encoder_lens)
    be.init_forward_metadata_capture_cuda_graph(
        bs, batch.num_tokens, placeholder, placeholder + 1, enc, batch.forward_mode, batch.spec_info
    )
    enc_cpu = None if batch.encoder_lens_cpu is None else batch.encoder_lens.cpu()

    def step():
        be.init_forward_metadata_replay_cuda_graph(
            batch.batch_size, batch.req_pool_indices, batch.seq_lens, batch.seq_lens_sum, batch.encoder_lens,
            batch.forward_mode, batch.spec_info, batch.seq_lens_cpu, enc_cpu,
        )

    return step


def main():
    args = parse_args(__doc__, repeats=1500, warmup=50)
    steps = []
    for seed, (kind, kwargs) in enumerate(GRAPH_MODES.values()):
        world = BenchWorld(args.device, seed=seed, max_reqs=REPLAY_BS + 1, **kwargs)
        steps.append(replay_step(world, world.batch(kind, REPLAY_BS)))

    names = list(GRAPH_MODES)
    per_mode = {name: [] for name in names}
    total = []
    for i in range(args.warmup + args.repeats):
        # L2 not flushed: a decode step prepares its metadata with warm caches, and flushing 2x L2 before
        # each of 9,300 calls made one sample take 4 s on an H100 (seen there, 2026-11-26)
        times = [time_ms(step, 1, 0, args.device, flush_l2=False)[0] for step in steps]
        if i >= args.warmup:
            total.append(sum(times))
            for name, t in zip(names, times):
                per_mode[name].append(t)
    emit("metadata_ms", total)
    for name in names:
        emit(f"metadata_{name}_ms", per_mode[name])

    world = BenchWorld(args.device, seed=99, max_reqs=EAGER_DECODE_BS + EAGER_EXTEND_BS + 1)
    decode = world.batch("decode", EAGER_DECODE_BS)
    extend = world.batch("extend", EAGER_EXTEND_BS)
    be = world.backend

    def eager():
        be.init_forward_metadata(decode)
        be.init_forward_metadata(extend)

    emit("eager_metadata_ms", time_ms(eager, max(args.repeats // 5, 10), args.warmup // 5 + 1, args.device,
                                      flush_l2=False))


if __name__ == "__main__":
    main()
