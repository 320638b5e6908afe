//! Where a preparation is ([`PrepareStage`], [`MapRound`]), what it reports, and how a
//! cancel is described.

use super::*;

/// A round of function tasks: of the min-max normalisation, or of a distributed preparation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapRound {
    /// Parsing byte ranges of the input and dealing their rows into buckets ([`SplitMapTask`](mlless_function::task::SplitMapTask)).
    Split,
    /// Shuffling buckets into minibatches ([`ShuffleReduceTask`](mlless_function::task::ShuffleReduceTask)).
    Shuffle,
    /// The feature ranges of the staged training minibatches ([`RangeMapTask`]).
    Ranges,
    /// Scaling the staged minibatches into the final ones ([`ScaleMapTask`]).
    Scale,
}

impl MapRound {
    /// The round's name, also the prefix of its tasks' names: `split-map`, `shuffle-reduce`,
    /// `range-map`, `scale-map`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Split => "split-map",
            Self::Shuffle => "shuffle-reduce",
            Self::Ranges => "range-map",
            Self::Scale => "scale-map",
        }
    }
}

/// Where a preparation is, as [`prepare_with`] shows it to its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrepareStage {
    /// Parsing and shuffling the input: nothing is written yet.
    Reading {
        /// Rows (or ratings) read so far (counted a chunk at a time; ratings only at the end).
        rows: u64,
    },
    /// Writing minibatches (staged ones for the normalisation, else the final ones).
    Writing {
        /// How many.
        minibatches: usize,
        /// Whether they are staged for the normalisation's map tasks.
        staged: bool,
        /// How many are written so far.
        written: usize,
    },
    /// A round of map tasks is running (they have all been invoked).
    Mapping {
        /// Which round.
        round: MapRound,
        /// How many tasks.
        tasks: usize,
        /// The minibatches they read.
        minibatches: usize,
    },
    /// Writing the manifest.
    Finishing,
}

impl PrepareStage {
    /// Whether `other` is the same stage, whatever its progress.
    pub fn same_stage(&self, other: &PrepareStage) -> bool {
        match (self, other) {
            (Self::Reading { .. }, Self::Reading { .. }) => true,
            (
                Self::Writing {
                    minibatches: a,
                    staged: x,
                    ..
                },
                Self::Writing {
                    minibatches: b,
                    staged: y,
                    ..
                },
            ) => a == b && x == y,
            _ => self == other,
        }
    }

    /// This stage with the progress `progress` counted.
    pub(super) fn with_progress(self, progress: &Progress) -> Self {
        match self {
            Self::Reading { .. } => Self::Reading {
                rows: progress.rows.load(Ordering::Relaxed),
            },
            Self::Writing {
                minibatches,
                staged,
                ..
            } => Self::Writing {
                minibatches,
                staged,
                written: progress.written.load(Ordering::Relaxed) as usize,
            },
            other => other,
        }
    }
}

/// What the preparation counts as it goes, for [`PrepareStage`]'s progress.
#[derive(Debug, Default)]
pub(super) struct Progress {
    /// Rows read.
    pub(super) rows: AtomicU64,
    /// Minibatches written.
    pub(super) written: AtomicU64,
}

impl fmt::Display for PrepareStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Reading { rows: 0 } => f.write_str("reading and shuffling the input"),
            Self::Reading { rows } => {
                write!(f, "reading and shuffling the input: {rows} rows so far")
            }
            Self::Writing {
                minibatches,
                staged,
                written,
            } => {
                let what = if staged { "staged " } else { "" };
                write!(f, "writing {minibatches} {what}minibatches")?;
                if written > 0 {
                    write!(f, ": {written} written")?;
                }
                Ok(())
            }
            Self::Mapping {
                round: MapRound::Split,
                tasks,
                ..
            } => write!(
                f,
                "{tasks} split-map tasks parsing the input's byte ranges into buckets"
            ),
            Self::Mapping {
                round,
                tasks,
                minibatches,
            } => {
                let doing = match round {
                    MapRound::Split => "parsing",
                    MapRound::Shuffle => "shuffling buckets into",
                    MapRound::Ranges => "computing the feature ranges of",
                    MapRound::Scale => "scaling",
                };
                write!(
                    f,
                    "{tasks} {} tasks {doing} {minibatches} minibatches",
                    round.name()
                )
            }
            Self::Finishing => f.write_str("writing the manifest"),
        }
    }
}

/// What the caller asked last, in the order of their force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Interrupt {
    None,
    Cancel,
    Kill,
}

/// The preparation's side of the caller's requests, and where it shows its stage.
pub(super) struct Requests<'a> {
    pub(super) level: watch::Receiver<Interrupt>,
    pub(super) stage: &'a watch::Sender<PrepareStage>,
    pub(super) progress: Arc<Progress>,
}

impl Requests<'_> {
    /// Whether the caller asked to stop (cancel or kill).
    pub(super) fn stopping(&self) -> bool {
        *self.level.borrow() != Interrupt::None
    }

    /// Shows `stage` to the caller.
    pub(super) fn enter(&self, stage: PrepareStage) {
        self.stage.send_replace(stage);
    }

    /// Completes once the caller asks to stop (never if it no longer can).
    pub(super) async fn stopped(&mut self) {
        self.next_request(false).await;
    }

    /// Completes once the caller asks for more than it did: a cancel (or a kill) when it has
    /// not yet `asked`, else a kill; never if it no longer can.
    pub(super) async fn next_request(&mut self, asked: bool) {
        let want = if asked {
            Interrupt::Kill
        } else {
            Interrupt::Cancel
        };
        if self.level.wait_for(|l| *l >= want).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// How a cancelled preparation's message describes it.
pub(super) fn describe_cancel(url: &str, stage: &PrepareStage, killed: bool) -> String {
    let rerun = "run the same `mlless prepare` again to write it";
    match stage {
        PrepareStage::Reading { .. } => {
            format!("cancelled while reading the input: nothing was written, {url} is as it was")
        }
        PrepareStage::Mapping { round, .. } => {
            let how = if killed {
                "were killed"
            } else {
                "stopped after their minibatch"
            };
            format!(
                "cancelled during the {} tasks, which {how}; what was written is removed and \
                 {url} holds no data set (its old manifest was removed first): {rerun}",
                round.name()
            )
        }
        PrepareStage::Writing { .. } | PrepareStage::Finishing => format!(
            "cancelled while {stage}; what was written is removed and {url} holds no data set \
             (its old manifest was removed first): {rerun}"
        ),
    }
}
