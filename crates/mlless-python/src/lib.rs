//! `mlless._native`, the extension module of the Python package (`python/` at the repository's
//! root): the same commands as the `mlless` binary, reached from Python.
//!
//! - [`prepare`] and [`train`] take the command line of `mlless prepare` and `mlless train`
//!   (the package's estimators build it from their parameters), parsed by the CLI's own `clap`
//!   arguments, so a bad option is refused with the CLI's message (`ValueError`); a run that
//!   fails raises [`RunError`] with its run's location. Progress goes to the CLI's bar on a
//!   terminal, else to a Python callable (the package's `logging`); Ctrl-C (Python's
//!   `KeyboardInterrupt`, seen through `PyErr_CheckSignals` at every poll) cancels the run as
//!   the CLI's first Ctrl-C does, a second kills its functions, and the interrupt is raised
//!   once the run has ended.
//! - [`function_main`] is `mlless function`: the local invoker starts every function of a run
//!   as the Python interpreter running it ([`set_function_command`]), so the functions come with
//!   the package and no `mlless` binary need be found.
//! - [`write_libsvm`] and [`write_ratings`] write arrays as the input of `prepare`.
//! - [`Model`] is a trained model (from a run, or from a safetensors file of `mlless export`)
//!   that predicts with the runtime's own `Predictor`.

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use clap::{Args, FromArgMatches};
use mlless_cli::prepare::PrepareArgs;
use mlless_cli::progress::{Mode, Reporter, text_line};
use mlless_cli::train::TrainArgs;
use mlless_core::{ModelSpec, Prediction, Predictor, SparseBatch};
use mlless_data::generate::push_u64;
use mlless_data::{IdMap, LabelMap, Normalization};
use mlless_job::record::RECORD_KEY;
use mlless_runtime::predict::TrainedModel;
use mlless_runtime::{Control, LiveProgress, PrepareStage, RuntimeError};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyKeyboardInterrupt, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

create_exception!(
    _native,
    RunError,
    PyException,
    "A run that failed: `args` are the message and the run's location."
);

/// Makes every local function of this process run `program args…` (the package's
/// `sys.executable` running [`function_main`]).
#[pyfunction]
fn set_function_command(program: PathBuf, args: Vec<String>) {
    mlless_cli::set_function_command(program, args);
}

/// `mlless function`: runs the invocation whose payload is on standard input; the exit status.
#[pyfunction]
fn function_main(py: Python<'_>) -> u8 {
    py.detach(mlless_cli::run_function_main)
}

/// `values` (little-endian bytes of 8-byte items) as `T`s.
fn le8<T>(values: &[u8], of: fn([u8; 8]) -> T) -> Vec<T> {
    values
        .chunks_exact(8)
        .map(|c| of(c.try_into().unwrap_or([0; 8])))
        .collect()
}

/// `values` (little-endian bytes of 4-byte items) as `T`s.
fn le4<T>(values: &[u8], of: fn([u8; 4]) -> T) -> Vec<T> {
    values
        .chunks_exact(4)
        .map(|c| of(c.try_into().unwrap_or([0; 4])))
        .collect()
}

/// A CSR matrix handed over as bytes: row offsets (`i64`), column indices (`i64`), values
/// (`f32`), checked.
struct Csr {
    indptr: Vec<i64>,
    indices: Vec<u32>,
    data: Vec<f32>,
}

impl Csr {
    fn new(indptr: &[u8], indices: &[u8], data: &[u8]) -> PyResult<Self> {
        let indptr = le8(indptr, i64::from_le_bytes);
        let indices = le8(indices, i64::from_le_bytes)
            .into_iter()
            .map(|i| u32::try_from(i).map_err(|_| PyValueError::new_err(format!("bad index {i}"))))
            .collect::<PyResult<Vec<u32>>>()?;
        let data = le4(data, f32::from_le_bytes);
        let nnz = indices.len() as i64;
        let ordered = indptr.first() == Some(&0)
            && indptr.windows(2).all(|w| w[0] <= w[1])
            && indptr.last() == Some(&nnz)
            && data.len() == indices.len();
        if !ordered {
            return Err(PyValueError::new_err(
                "the CSR arrays do not agree (indptr, indices, data)",
            ));
        }
        Ok(Self {
            indptr,
            indices,
            data,
        })
    }

    fn rows(&self) -> usize {
        self.indptr.len() - 1
    }

    fn row(&self, r: usize) -> (&[u32], &[f32]) {
        let (a, b) = (self.indptr[r] as usize, self.indptr[r + 1] as usize);
        (&self.indices[a..b], &self.data[a..b])
    }
}

/// A label as LIBSVM text: an integer without a fraction, else the shortest decimal.
fn label_text(label: f64) -> String {
    if label.fract() == 0.0 && label.abs() < 1e15 {
        format!("{}", label as i64)
    } else {
        format!("{label}")
    }
}

/// Appends `v` as its shortest decimal that reads back as the same `f32` (what `{}` writes),
/// integers below 2^24 without the formatter.
fn push_f32(out: &mut Vec<u8>, v: f32) -> std::io::Result<()> {
    if v.fract() == 0.0 && v.abs() < 16_777_216.0 && !(v == 0.0 && v.is_sign_negative()) {
        if v < 0.0 {
            out.push(b'-');
        }
        push_u64(out, v.abs() as u64);
        Ok(())
    } else {
        write!(out, "{v}")
    }
}

/// Writes rows (CSR: `indptr`, `indices` as little-endian `i64`, `data` as `f32`) with their
/// `labels` (`f64`) as a LIBSVM file at `path` (1-based indices, values in their shortest
/// decimal, which reads back as the same `f32`).
#[pyfunction]
fn write_libsvm(
    py: Python<'_>,
    path: PathBuf,
    indptr: &[u8],
    indices: &[u8],
    data: &[u8],
    labels: &[u8],
) -> PyResult<()> {
    let csr = Csr::new(indptr, indices, data)?;
    let labels = le8(labels, f64::from_le_bytes);
    if labels.len() != csr.rows() {
        return Err(PyValueError::new_err(format!(
            "{} labels for {} rows",
            labels.len(),
            csr.rows()
        )));
    }
    py.detach(|| -> std::io::Result<()> {
        let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
        let mut line = Vec::with_capacity(1 << 12);
        for (r, &label) in labels.iter().enumerate() {
            line.clear();
            line.extend_from_slice(label_text(label).as_bytes());
            let (indices, values) = csr.row(r);
            for (&i, &v) in indices.iter().zip(values) {
                line.push(b' ');
                push_u64(&mut line, u64::from(i) + 1);
                line.push(b':');
                push_f32(&mut line, v)?;
            }
            line.push(b'\n');
            out.write_all(&line)?;
        }
        out.flush()
    })
    .map_err(|e| PyOSError::new_err(format!("writing {}: {e}", path.display())))
}

/// Writes ratings as a MovieLens `u.data` file at `path` (`user item rating 0`, tab-separated;
/// ids as little-endian `i64`, ratings as `f32`).
#[pyfunction]
fn write_ratings(
    py: Python<'_>,
    path: PathBuf,
    users: &[u8],
    items: &[u8],
    ratings: &[u8],
) -> PyResult<()> {
    let users = le8(users, i64::from_le_bytes);
    let items = le8(items, i64::from_le_bytes);
    let ratings = le4(ratings, f32::from_le_bytes);
    if users.len() != items.len() || users.len() != ratings.len() {
        return Err(PyValueError::new_err(
            "users, items and ratings differ in length",
        ));
    }
    py.detach(|| -> std::io::Result<()> {
        let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
        for ((u, i), r) in users.iter().zip(&items).zip(&ratings) {
            writeln!(out, "{u}\t{i}\t{r}\t0")?;
        }
        out.flush()
    })
    .map_err(|e| PyOSError::new_err(format!("writing {}: {e}", path.display())))
}

/// Parses `argv` (the options of `mlless {command}`) with the CLI's arguments `T`; a bad option
/// is a `ValueError` with clap's message.
fn parse_args<T: Args + FromArgMatches>(command: &'static str, argv: &[String]) -> PyResult<T> {
    let cmd = T::augment_args(clap::Command::new(command).no_binary_name(true));
    let matches = cmd
        .try_get_matches_from(argv)
        .map_err(|e| PyValueError::new_err(e.render().to_string().trim_end().to_owned()))?;
    T::from_arg_matches(&matches).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// An error of the CLI's layer before anything ran: a bad option.
fn value_error(e: anyhow::Error) -> PyErr {
    PyValueError::new_err(mlless_cli::one_line(&e))
}

/// Counts the interrupts Python saw (`KeyboardInterrupt` from `PyErr_CheckSignals`) and keeps
/// the first to raise it when the run has ended.
#[derive(Default)]
struct Interrupts {
    count: AtomicU32,
    first: std::sync::Mutex<Option<PyErr>>,
}

impl Interrupts {
    /// Checks Python's signals: the control they ask for (`Cancel` at the first interrupt,
    /// `Kill` from the second on).
    fn check(&self, what: &str) -> Control {
        if let Some(err) = Python::attach(|py| py.check_signals().err()) {
            self.note(err, what);
        }
        match self.count.load(Ordering::SeqCst) {
            0 => Control::Continue,
            1 => Control::Cancel,
            _ => Control::Kill,
        }
    }

    /// Counts `err`, an interrupt raised by Python code (a signal's handler), and says at the
    /// first what it does: `what`.
    fn note(&self, err: PyErr, what: &str) {
        let n = self.count.fetch_add(1, Ordering::SeqCst) + 1;
        if n == 1 {
            eprintln!(
                "\ncancelling: {what} (up to {} s; interrupt again to kill them now)",
                mlless_runtime::CANCEL_GRACE.as_secs()
            );
            if let Ok(mut first) = self.first.lock() {
                *first = Some(err);
            }
        }
    }

    /// The interrupt to raise, if there was one.
    fn take(&self) -> Option<PyErr> {
        if self.count.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let first = self.first.lock().ok().and_then(|mut first| first.take());
        Some(first.unwrap_or_else(|| PyKeyboardInterrupt::new_err("")))
    }
}

/// Shows progress: the CLI's bar (`bar`), or a line to `log` every `every_s` seconds.
struct Progress {
    reporter: Reporter,
    log: Option<Py<PyAny>>,
    every_s: f64,
    next_at_s: f64,
}

impl Progress {
    fn new(bar: bool, quiet: bool, log: Option<Py<PyAny>>, every_s: f64, epochs: u32) -> Self {
        let mode = if bar && !quiet { Mode::Bar } else { Mode::Off };
        Self {
            reporter: Reporter::new(mode, epochs),
            log: if quiet || every_s <= 0.0 { None } else { log },
            every_s,
            next_at_s: every_s,
        }
    }

    /// Shows `line` through the Python callable. A `KeyboardInterrupt` it raised (a signal
    /// handled while it ran) is returned, for [`Interrupts::note`]; any other failure is shown
    /// as Python shows an unraisable error, and training goes on.
    fn log(&self, line: String) -> Option<PyErr> {
        let log = self.log.as_ref()?;
        Python::attach(|py| match log.bind(py).call1((line,)) {
            Ok(_) => None,
            Err(e) if e.is_instance_of::<PyKeyboardInterrupt>(py) => Some(e),
            Err(e) => {
                e.write_unraisable(py, None);
                None
            }
        })
    }

    fn observe(&mut self, p: &LiveProgress) -> Option<PyErr> {
        self.reporter.observe(p);
        if self.log.is_some() && p.elapsed_s >= self.next_at_s {
            self.next_at_s = ((p.elapsed_s / self.every_s).floor() + 1.0) * self.every_s;
            return self.log(text_line(p));
        }
        None
    }
}

/// `mlless prepare ARGV…`: prepares a data set; returns its manifest as JSON. Stages are shown
/// to `log`; Ctrl-C stops it and removes what it wrote, then raises `KeyboardInterrupt`.
#[pyfunction]
#[pyo3(signature = (argv, log=None))]
fn prepare(py: Python<'_>, argv: Vec<String>, log: Option<Py<PyAny>>) -> PyResult<String> {
    let args: PrepareArgs = parse_args("prepare", &argv)?;
    let options = args.options();
    options
        .validate()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let invoker = args.invoker.invoker().map_err(value_error)?;
    let runtime = mlless_cli::runtime().map_err(|e| PyOSError::new_err(e.to_string()))?;
    let interrupts = Interrupts::default();
    let progress = Progress::new(false, false, log, 1.0, 0);
    let result = py.detach(|| {
        let mut shown: Option<PrepareStage> = None;
        let mut observe = |stage: &PrepareStage| {
            let what = "the preparation stops and what it wrote is removed";
            if !shown.as_ref().is_some_and(|s| s.same_stage(stage)) {
                if let Some(interrupt) = progress.log(format!("prepare: {stage}")) {
                    interrupts.note(interrupt, what);
                }
                shown = Some(*stage);
            }
            interrupts.check(what)
        };
        runtime.block_on(mlless_runtime::prepare_with(
            &options,
            invoker,
            &mut observe,
        ))
    });
    if let Some(interrupt) = interrupts.take() {
        return Err(interrupt);
    }
    match result {
        Ok(manifest) => Ok(String::from_utf8_lossy(&manifest.to_json()).into_owned()),
        // What the preparation refuses or fails on before it could be blamed on a run: the
        // options, the input, and (as before the error had groups) its own internal failures.
        Err(
            e @ (RuntimeError::Config(_)
            | RuntimeError::Refused(_)
            | RuntimeError::Mismatch(_)
            | RuntimeError::Input(_)
            | RuntimeError::Internal(_)),
        ) => Err(PyValueError::new_err(e.to_string())),
        Err(e) => Err(RunError::new_err((e.to_string(), args.out.clone()))),
    }
}

/// `mlless train ARGV…`: trains; returns `(record JSON, run location)`. Progress goes to the
/// CLI's bar when `bar`, else to `log` (a line every `--progress-every` seconds); a bad option
/// is a `ValueError` with the CLI's message, a failed run a [`RunError`]; Ctrl-C cancels the run
/// after its step (a second kills its functions) and raises `KeyboardInterrupt` once it ended.
#[pyfunction]
#[pyo3(signature = (argv, bar=false, log=None))]
fn train(
    py: Python<'_>,
    argv: Vec<String>,
    bar: bool,
    log: Option<Py<PyAny>>,
) -> PyResult<(String, String)> {
    let mut args: TrainArgs = parse_args("train", &argv)?;
    if args.resume.is_some() {
        return Err(PyValueError::new_err(
            "--resume is the CLI's: `mlless train --resume RUN`",
        ));
    }
    let job_id = args
        .job_id
        .get_or_insert_with(mlless_runtime::job_id::new)
        .clone();
    let options = args.options().map_err(value_error)?;
    let invoker = args.invoker.invoker().map_err(value_error)?;
    options
        .validate_for(&*invoker)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let run_url = options.run_url(&job_id);
    let runtime = mlless_cli::runtime().map_err(|e| PyOSError::new_err(e.to_string()))?;
    mlless_cli::init_tracing(false, mlless_cli::progress::LogFormat::Text);
    let interrupts = Interrupts::default();
    let mut progress = Progress::new(bar, args.quiet, log, args.progress_every, args.max_epochs);
    let result = py.detach(|| {
        let what = "the workers stop after their current step";
        let mut observe = |p: &LiveProgress| {
            if let Some(interrupt) = progress.observe(p) {
                interrupts.note(interrupt, what);
            }
            interrupts.check(what)
        };
        runtime.block_on(mlless_runtime::train(&options, invoker, &mut observe))
    });
    progress.reporter.finish();
    if let Some(interrupt) = interrupts.take() {
        return Err(interrupt);
    }
    match result {
        Ok(record) => {
            let json = serde_json::to_string(&record)
                .map_err(|e| RunError::new_err((e.to_string(), run_url.clone())))?;
            Ok((json, run_url))
        }
        Err(e @ RuntimeError::Config(_)) => Err(PyValueError::new_err(e.to_string())),
        Err(e) => Err(RunError::new_err((e.to_string(), run_url))),
    }
}

/// A trained model, from a run or a safetensors file of `mlless export`, that predicts with the
/// runtime's `Predictor`.
#[pyclass(module = "mlless._native", frozen)]
struct Model {
    spec: ModelSpec,
    params: Vec<f32>,
    label_map: Option<LabelMap>,
    normalization: Option<Normalization>,
    ids: Option<IdMap>,
    record: Option<String>,
    location: String,
}

/// A safetensors file's parts, or the reason it is not one of `mlless export`.
fn from_safetensors(location: &str, bytes: &[u8]) -> Result<Model, String> {
    let (_, header) = safetensors::SafeTensors::read_metadata(bytes).map_err(|e| e.to_string())?;
    let metadata = header
        .metadata()
        .clone()
        .ok_or("no metadata: not a file of mlless export")?;
    let get = |key: &str| {
        metadata
            .get(key)
            .ok_or_else(|| format!("no {key} in its metadata: not a file of mlless export"))
    };
    let spec: ModelSpec = serde_json::from_str(get("spec")?).map_err(|e| e.to_string())?;
    let label_map: Option<LabelMap> =
        serde_json::from_str(get("label_map")?).map_err(|e| e.to_string())?;
    let tensors = safetensors::SafeTensors::deserialize(bytes).map_err(|e| e.to_string())?;
    let f32s = |name: &str| -> Result<Vec<f32>, String> {
        let view = tensors.tensor(name).map_err(|e| format!("{name}: {e}"))?;
        Ok(le4(view.data(), f32::from_le_bytes))
    };
    let i64s = |name: &str| -> Result<Vec<u32>, String> {
        let view = tensors.tensor(name).map_err(|e| format!("{name}: {e}"))?;
        le8(view.data(), i64::from_le_bytes)
            .into_iter()
            .map(|v| u32::try_from(v).map_err(|_| format!("{name}: id {v} out of range")))
            .collect()
    };
    let mut params = Vec::with_capacity(spec.num_params());
    for block in spec.parameter_blocks() {
        params.extend(f32s(&block.name)?);
    }
    let names: Vec<String> = tensors.names().into_iter().map(str::to_owned).collect();
    let has = |name: &str| names.iter().any(|n| n == name);
    let normalization = if has("normalization_min") {
        Some(Normalization {
            method: "minmax".into(),
            min: f32s("normalization_min")?,
            max: f32s("normalization_max")?,
        })
    } else {
        None
    };
    let ids = if has("user_ids") {
        Some(IdMap {
            users: i64s("user_ids")?,
            items: i64s("item_ids")?,
        })
    } else {
        None
    };
    Ok(Model {
        spec,
        params,
        label_map,
        normalization,
        ids,
        record: None,
        location: location.to_owned(),
    })
}

/// A model error on input rows: the input is at fault.
fn model_error(e: mlless_core::ModelError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

#[pymethods]
impl Model {
    /// Loads the model of a run (`{runs}/{job}` or its `model.bin`) or a `.safetensors` file
    /// written by `mlless export`.
    #[staticmethod]
    fn load(py: Python<'_>, location: String) -> PyResult<Self> {
        if location.ends_with(".safetensors") {
            let bytes = std::fs::read(&location)
                .map_err(|e| PyOSError::new_err(format!("reading {location}: {e}")))?;
            return from_safetensors(&location, &bytes)
                .map_err(|e| PyValueError::new_err(format!("{location}: {e}")));
        }
        let runtime = mlless_cli::runtime().map_err(|e| PyOSError::new_err(e.to_string()))?;
        let (trained, record) = py
            .detach(|| {
                runtime.block_on(async {
                    let trained = TrainedModel::load(&location, None).await?;
                    // The record as written (serde_json does not read every float back to
                    // its last bit), from beside the model.
                    let record = match trained.record {
                        Some(_) => {
                            let dir = trained.model_url.rsplit_once('/').map_or(".", |(d, _)| d);
                            mlless_store::Store::open(dir)?
                                .get_opt(RECORD_KEY)
                                .await?
                                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                        }
                        None => None,
                    };
                    Ok::<_, RuntimeError>((trained, record))
                })
            })
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(Self {
            spec: trained.model.spec,
            params: trained.model.params,
            label_map: trained.manifest.label_map,
            normalization: trained.manifest.normalization,
            ids: trained.ids,
            record,
            location,
        })
    }

    /// The model's short name (`lr`, `svm`, `kmeans`, `mlp`, `pmf`).
    #[getter]
    fn name(&self) -> &'static str {
        self.spec.name()
    }

    /// The model's spec (shapes and hyper-parameters) as JSON.
    #[getter]
    fn spec_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.spec).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// The input features the model reads (`None` for ratings).
    #[getter]
    fn features(&self) -> Option<u32> {
        self.spec.input_features()
    }

    /// The original labels of classes 0 and 1, when the data set mapped them.
    #[getter]
    fn label_map(&self) -> Option<(f32, f32)> {
        self.label_map.map(|m| (m.negative, m.positive))
    }

    /// The run's record as JSON, when the model came from a run.
    #[getter]
    fn record_json(&self) -> Option<String> {
        self.record.clone()
    }

    /// Where the model was loaded from.
    #[getter]
    fn location(&self) -> String {
        self.location.clone()
    }

    /// The original user and item ids of a ratings model's rows, ascending.
    fn ids(&self) -> Option<(Vec<u32>, Vec<u32>)> {
        self.ids
            .as_ref()
            .map(|ids| (ids.users.clone(), ids.items.clone()))
    }

    /// The parameters as named tensors (`mlless export`'s names): name → (shape, `f32` bytes).
    fn tensors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for block in self.spec.parameter_blocks() {
            let values = self.params.get(block.range.clone()).ok_or_else(|| {
                PyValueError::new_err(format!("{}: too few parameters", self.location))
            })?;
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            out.set_item(block.name, (block.shape, PyBytes::new(py, &bytes)))?;
        }
        if let ModelSpec::MatrixFactorization { mean, .. } = self.spec {
            out.set_item(
                "global_mean",
                (vec![1usize], PyBytes::new(py, &mean.to_le_bytes())),
            )?;
        }
        Ok(out)
    }

    /// Predicts rows (CSR as for [`write_libsvm`]; entries at or past the model's features
    /// must have been dropped): `(values, width, extra)` as little-endian `f64` bytes — LR the
    /// logits, SVM the margins (width 1); MLP the logits (width C); k-means the clusters, with
    /// the squared distances as `extra`.
    fn predict_rows<'py>(
        &self,
        py: Python<'py>,
        indptr: &[u8],
        indices: &[u8],
        data: &[u8],
    ) -> PyResult<(Bound<'py, PyBytes>, usize, Option<Bound<'py, PyBytes>>)> {
        let csr = Csr::new(indptr, indices, data)?;
        let mut rows = SparseBatch::new();
        for r in 0..csr.rows() {
            let (indices, values) = csr.row(r);
            rows.push_row(0.0, indices, values);
        }
        if let Some(normalization) = &self.normalization {
            normalization.apply(&mut rows);
        }
        let predictor = Predictor::new(&self.spec, &self.params).map_err(model_error)?;
        let predictions = py
            .detach(|| predictor.predict_rows(&rows))
            .map_err(model_error)?;
        let mut values: Vec<f64> = Vec::with_capacity(predictions.len());
        let mut extra: Vec<f64> = Vec::new();
        let mut width = 1;
        for p in predictions {
            match p {
                Prediction::Logit(z) | Prediction::Margin(z) | Prediction::Rating(z) => {
                    values.push(z);
                }
                Prediction::Cluster {
                    cluster,
                    sq_distance,
                } => {
                    values.push(f64::from(cluster));
                    extra.push(sq_distance);
                }
                Prediction::Classes(logits) => {
                    width = logits.len();
                    values.extend(logits.iter().map(|&z| f64::from(z)));
                }
            }
        }
        let bytes = |v: &[f64]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let extra = (!extra.is_empty()).then(|| PyBytes::new(py, &bytes(&extra)));
        Ok((PyBytes::new(py, &bytes(&values)), width, extra))
    }

    /// Predicts the ratings of `(user, item)` pairs by original ids (`None`: an id the caller
    /// knows is unseen); an id the model does not know gets the bias-only prediction.
    fn predict_ratings<'py>(
        &self,
        py: Python<'py>,
        users: Vec<Option<u32>>,
        items: Vec<Option<u32>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let predictor = Predictor::new(&self.spec, &self.params).map_err(model_error)?;
        let ids = self
            .ids
            .as_ref()
            .ok_or_else(|| PyValueError::new_err(format!("{}: no id map", self.location)))?;
        let mut out = Vec::with_capacity(users.len() * 8);
        for (u, i) in users.into_iter().zip(items) {
            let u = u.and_then(|u| ids.user(u));
            let i = i.and_then(|i| ids.item(i));
            let r = predictor.predict_rating(u, i).map_err(model_error)?;
            out.extend(r.to_le_bytes());
        }
        Ok(PyBytes::new(py, &out))
    }
}

/// The module: its functions, [`Model`] and [`RunError`].
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(set_function_command, m)?)?;
    m.add_function(wrap_pyfunction!(function_main, m)?)?;
    m.add_function(wrap_pyfunction!(write_libsvm, m)?)?;
    m.add_function(wrap_pyfunction!(write_ratings, m)?)?;
    m.add_function(wrap_pyfunction!(prepare, m)?)?;
    m.add_function(wrap_pyfunction!(train, m)?)?;
    m.add_class::<Model>()?;
    m.add("RunError", m.py().get_type::<RunError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
