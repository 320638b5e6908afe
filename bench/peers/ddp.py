"""PyTorch DistributedDataParallel peer of `mlless train --workers P` (gloo, CPU).

P processes (torch.multiprocessing.spawn), one thread each; every rank reads the same split
files mlless was prepared from and takes its own minibatches in mlless's order (worker r
reads position t * P + r of the per-epoch permutations of fixed minibatches). A step is the
minibatch gather, forward, backward (DDP all-reduces the gradients in it), and the optimiser
step; it is timed with time.perf_counter on every rank. Rank 0 evaluates the model on the test
set after each epoch, off the clock, and prints one JSON line: the median step time over ranks
and steps without the first 3, the steps, the test metrics, and their curve over the epochs.

  python3 ddp.py --job pmf --data ratings.tsv --batch 1000 --epochs 40
  python3 ddp.py --job lr --data a9a.libsvm --batch 256 --epochs 10

What differs from mlless (the model, the loss, the rate and its schedule are mlless's):
- PMF: nn.Embedding with dense gradients, so DDP all-reduces every factor (about 28k floats
  for ML-100k) where mlless exchanges the sparse rows a minibatch touched; and DDP averages the
  gradients and runs one Adam on the mean, whose dense update moves every row each step, where
  each mlless worker runs a lazy Adam (touched rows only) on its own gradient and the workers
  average the resulting updates.
- LR: torch's momentum keeps moving a weight its batch did not touch; mlless's sparse momentum
  leaves it until it is touched (with 123 features nearly all are touched every step).
- The minibatches are cut from a different shuffle than `mlless prepare`'s, and the
  initialisation draws other random numbers; the split itself is the same.
"""

import argparse
import math
import os
import socket
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import common


class PMF(nn.Module):
    """mlless's matrix factorisation: mean + b_u + b_i + p_u . q_i."""

    def __init__(self, users, items, factors, mean, init_std):
        super().__init__()
        self.p, self.q = nn.Embedding(users, factors), nn.Embedding(items, factors)
        self.bu, self.bi = nn.Embedding(users, 1), nn.Embedding(items, 1)
        for table in (self.p, self.q):
            nn.init.normal_(table.weight, std=init_std)
        for table in (self.bu, self.bi):
            nn.init.zeros_(table.weight)
        self.mean = mean

    def forward(self, u, i):
        """Predictions, and the rows they used (for the L2 term)."""
        p, q = self.p(u), self.q(i)
        bu, bi = self.bu(u).squeeze(1), self.bi(i).squeeze(1)
        return self.mean + bu + bi + (p * q).sum(1), (p, q, bu, bi)


class LogReg(nn.Module):
    """Logistic regression: one linear unit, weights 0, bias at the training log-odds."""

    def __init__(self, features, bias):
        super().__init__()
        self.linear = nn.Linear(features, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.constant_(self.linear.bias, bias)

    def forward(self, x):
        return self.linear(x).squeeze(1)


def pmf_job(prefix, rate=None):
    """(model, optimiser, base rate, training rows, loss of a minibatch, test metrics)."""
    (u, i, r), test, users, items = common.load_ratings(prefix)
    cfg = common.PMF
    model = PMF(users, items, cfg["factors"], float(r.mean()), cfg["init_std"])
    # Per-example L2 plus the count-aware prior: l2 + prior / n for a user or item with n
    # training ratings, on its factors and its bias, as mlless's gradient has it.
    l2u = torch.tensor(cfg["l2"] + cfg["prior"] / np.maximum(np.bincount(u, minlength=users), 1))
    l2i = torch.tensor(cfg["l2"] + cfg["prior"] / np.maximum(np.bincount(i, minlength=items), 1))
    u, i, r = torch.from_numpy(u), torch.from_numpy(i), torch.from_numpy(r)
    l2u, l2i = l2u.float(), l2i.float()

    def loss(net, idx):
        bu_, bi_, r_ = u[idx], i[idx], r[idx]
        pred, (p, q, bu, bi) = net(bu_, bi_)
        penalty = l2u[bu_] * ((p * p).sum(1) + bu * bu) + l2i[bi_] * ((q * q).sum(1) + bi * bi)
        return ((pred - r_) ** 2).mean() + 0.5 * penalty.mean()

    def evaluate(net):
        pred, _ = net(*(torch.from_numpy(a) for a in test[:2]))
        return common.rmse(test[2], pred.numpy())

    rate = rate or cfg["lr"]
    optimiser = torch.optim.Adam(model.parameters(), lr=rate)
    return model, optimiser, rate, len(r), loss, evaluate


def lr_job(prefix, global_batch, rate=None):
    """(model, optimiser, base rate, training rows, loss of a minibatch, test metrics)."""
    (x, y), (xt, yt) = common.load_libsvm(prefix)
    positive = float(y.mean())
    model = LogReg(x.shape[1], common.initial_bias(positive))
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    nonzero = (x != 0).float()
    l2 = common.LR["l2"]

    def loss(net, idx):
        # Mean log loss plus l2/2 of the squared weights of each row's features, averaged
        # over the rows (mlless's per-example L2; the bias is not regularised).
        z = net(x[idx])
        w2 = net.module.linear.weight.squeeze(0) ** 2
        penalty = (nonzero[idx] @ w2).mean()
        return nn.functional.binary_cross_entropy_with_logits(z, y[idx]) + 0.5 * l2 * penalty

    def evaluate(net):
        return common.classification(yt, torch.sigmoid(net(torch.from_numpy(xt))).numpy())

    rate = rate or common.lr_rate(global_batch, positive)
    optimiser = torch.optim.SGD(model.parameters(), lr=rate, momentum=common.LR["momentum"])
    return model, optimiser, rate, len(y), loss, evaluate


def run(rank, args):
    """One rank: build the job, train, gather the step times, rank 0 reports. At the end of
    each epoch (and of the last step) rank 0 evaluates the model off the clock while the
    others wait at a barrier: its curve."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.workers)
    torch.manual_seed(args.seed)
    decay_epochs = (common.PMF if args.job == "pmf" else common.LR)["decay_epochs"]
    if args.job == "pmf":
        model, optimiser, rate, rows, loss, evaluate = pmf_job(args.data, args.lr)
    else:
        model, optimiser, rate, rows, loss, evaluate = lr_job(args.data, args.batch * args.workers,
                                                              args.lr)
    net = DDP(model)
    batches = [torch.from_numpy(b) for b in common.minibatches(rows, args.batch, args.seed)]
    steps = common.schedule(len(batches), args.workers, args.epochs, args.seed)
    times = []
    curve = common.Curve()
    for t, step in enumerate(steps):
        epoch, b = step[rank]
        t0 = time.perf_counter()
        for group in optimiser.param_groups:
            group["lr"] = rate / math.sqrt(1 + epoch / decay_epochs)
        value = loss(net, batches[b])
        optimiser.zero_grad(set_to_none=True)
        value.backward()
        optimiser.step()
        times.append((time.perf_counter() - t0) * 1000)
        done = (t + 1) * args.workers  # minibatches read so far
        if done // len(batches) > t * args.workers // len(batches) or t == len(steps) - 1:
            if rank == 0:
                with torch.no_grad():
                    curve.evaluate(round(done / len(batches), 4), lambda: evaluate(model))
            dist.barrier()
    wall = curve.elapsed()
    gathered = [None] * args.workers
    dist.all_gather_object(gathered, times)
    if rank == 0:
        common.report("ddp", args.job, common.median_step(gathered), max(map(len, gathered)),
                      curve.points[-1]["metrics"], curve, lr=rate, wall_s=wall,
                      workers=args.workers, batch=args.batch, torch=torch.__version__)
    dist.barrier()  # no rank tears gloo down while another still talks to it
    dist.destroy_process_group()


def main():
    """Parses the options and spawns the ranks on a free loopback port."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--job", choices=["pmf", "lr"], required=True)
    parser.add_argument("--data", required=True, help="the data file; reads DATA.train, DATA.test")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch", type=int, required=True, help="minibatch per worker")
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lr", type=float, help="the base rate [default: mlless's; for LR its "
                        "rule on the training set's positive rate, which mlless estimates on a "
                        "sample: give the rate of mlless's run to match it exactly]")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    mp.spawn(run, args=(args,), nprocs=args.workers)


if __name__ == "__main__":
    main()
