"""Spark MLlib peer of `mlless train --workers P`: one Spark in local mode, `local[P]`.

PMF: `pyspark.ml.recommendation.ALS`, rank 10, on the training ratings less their mean (ALS
has no mean and no biases: the mean is added back to its predictions, and a test user or item
it never saw is predicted at the mean). Its regularisation is ALS-WR's, `regParam` times a
row's count of ratings on that row's squared factors; mlless's per-example L2 and count-aware
prior come to 0.025 + 5 / n per rating on a row of n ratings, which `regParam` = 0.1 matches
at the median rows (ALS_REG). mlless's biases have no counterpart. A step is one ALS
iteration (a solve of every user's factors, then every item's): a pass over the data, not a
minibatch.

LR: `pyspark.ml.classification.LogisticRegression`, binomial, L2 `regParam` = mlless's 1e-4
on every weight (mlless puts it on a row's features per example), `standardization=False` (the
model mlless trains, not one on rescaled features), `tol=0` (it runs every iteration asked
for); Spark fits it by L-BFGS on the whole training set, the bias started at the log-odds as
mlless's is. A step is one L-BFGS iteration (a gradient over all rows, and more in a line
search that needs them).

Spark has no hook after an iteration, so the curve comes from separate fits of k = 1 .. K
iterations on the same cached data with the same seed (both fits are deterministic: the fit of
k iterations is the first k of a longer one); a point's time is the wall time of its fit,
evaluation off the clock. The step time is the marginal one: the least-squares slope of a
fit's time over its iterations, across those fits and one of 50 iterations (L-BFGS may stop
sooner: its count). When the fixed cost of a fit dwarfs its iterations (LR here) that slope
is within the noise of the fits, and may come out negative: the table says so. Spark's
start-up (the JVM, 9-13 s here) and one warm-up fit of 1 iteration are left out of the
times and reported apart (`startup_s`, `warmup_s`); loading and caching the data too.

  python3 spark_peer.py --job pmf --data ratings.tsv --workers 4 --iterations 15
  python3 spark_peer.py --job lr --data a9a.libsvm --workers 4 --iterations 15
"""

import argparse
import tempfile
import time

import numpy as np

import common

# ALS-WR puts regParam x n on a row of n ratings; mlless puts (l2 + prior / n) / 2 per rating on
# it, that is l2 / 2 + prior / (2 n) per rating: 0.085 at the median user (84 ratings), 0.13 at
# the median item (47) of the ML-100k-shaped set. 0.1 between them.
ALS_REG = 0.1


def session(workers, scratch):
    """A local Spark of `workers` cores, quiet, without its web UI, checkpointing to
    `scratch` (ALS cuts its lineage there every 10 iterations: without that, a fit of 50
    overflows the JVM's stack)."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(f"local[{workers}]").appName("mlless-peer")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", str(workers))
             .config("spark.default.parallelism", str(workers))
             .config("spark.driver.memory", "2g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.sparkContext.setCheckpointDir(scratch)
    return spark


def pmf_job(spark, prefix, workers, seed):
    """(estimator of k iterations, training DataFrame, test metrics of a model)."""
    from pyspark.ml.recommendation import ALS

    (u, i, r), (tu, ti, tr), _, _ = common.load_ratings(prefix)
    mean = float(r.mean())

    def frame(users, items, ratings):
        rows = zip(users.tolist(), items.tolist(), (ratings - mean).tolist())
        return spark.createDataFrame(rows, "user int, item int, rating float")

    train, test = frame(u, i, r).repartition(workers).cache(), frame(tu, ti, tr).cache()

    def estimator(k):
        return ALS(rank=common.PMF["factors"], maxIter=k, regParam=ALS_REG, userCol="user",
                   itemCol="item", ratingCol="rating", numUserBlocks=workers,
                   numItemBlocks=workers, coldStartStrategy="nan", seed=seed)

    def evaluate(model):
        rows = model.transform(test).select("rating", "prediction").collect()
        truth = np.array([row[0] for row in rows])
        guess = np.nan_to_num(np.array([row[1] for row in rows], dtype=np.float64))
        return common.rmse(truth + mean, guess + mean)

    return estimator, train, evaluate


def lr_job(spark, prefix, workers, seed):
    """(estimator of k iterations, training DataFrame, test metrics of a model)."""
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.linalg import SparseVector

    train_rows, test_rows = common.read_libsvm(prefix)
    width = common.features(train_rows, test_rows)

    def frame(labels, rows):
        data = [(float(y), SparseVector(width, sorted(row))) for y, row in zip(labels, rows)]
        return spark.createDataFrame(data, ["label", "features"])

    train = frame(*train_rows).repartition(workers).cache()
    test = frame(*test_rows).cache()

    def estimator(k):
        return LogisticRegression(maxIter=k, regParam=common.LR["l2"], elasticNetParam=0.0,
                                  standardization=False, tol=0.0, fitIntercept=True,
                                  family="binomial")

    def evaluate(model):
        rows = model.transform(test).select("label", "probability").collect()
        return common.classification([row[0] for row in rows], [row[1][1] for row in rows])

    return estimator, train, evaluate


def slope(points):
    """The least-squares slope of y over x of (x, y) points."""
    xs, ys = zip(*points)
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else float("nan")


def main():
    """Parses the options, fits 1 .. K iterations, reports."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--job", choices=["pmf", "lr"], required=True)
    parser.add_argument("--data", required=True, help="the data file; reads DATA.train, DATA.test")
    parser.add_argument("--workers", type=int, default=4, help="Spark's cores: local[WORKERS]")
    parser.add_argument("--iterations", type=int, default=10, help="K: the longest fit")
    parser.add_argument("--step-iterations", type=int, default=50,
                        help="the iterations of the fit that times an iteration")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    scratch = tempfile.TemporaryDirectory(prefix="spark-peer-")
    t0 = time.perf_counter()
    spark = session(args.workers, scratch.name)
    startup = time.perf_counter() - t0
    job = pmf_job if args.job == "pmf" else lr_job
    estimator, train, evaluate = job(spark, args.data, args.workers, args.seed)
    rows = train.count()  # loads and caches the training set, off the clock
    t0 = time.perf_counter()
    estimator(1).fit(train)
    warmup = time.perf_counter() - t0
    curve = common.Curve()
    for k in range(1, args.iterations + 1):
        t0 = time.perf_counter()
        model = estimator(k).fit(train)
        curve.add(k, time.perf_counter() - t0, evaluate(model))
    # The time of an iteration: the least-squares slope of a fit's time over its iterations,
    # across the fits of the curve and one long fit, so that the fixed cost of a fit (its jobs
    # before and after the iterations) and the noise of single fits stay apart.
    t0 = time.perf_counter()
    long = estimator(args.step_iterations).fit(train)
    long_s = time.perf_counter() - t0
    done = long.summary.totalIterations if args.job == "lr" else args.step_iterations
    fits = [(p["epoch"], p["time_s"]) for p in curve.points] + [(done, long_s)]
    step_ms = slope(fits) * 1000
    common.report("spark", args.job, step_ms, args.iterations, curve.points[-1]["metrics"], curve,
                  workers=args.workers, rows=rows, startup_s=startup, warmup_s=warmup,
                  fit_s=curve.points[0]["time_s"], timed_iterations=done,
                  spark=spark.version)
    spark.stop()
    scratch.cleanup()


if __name__ == "__main__":
    main()
