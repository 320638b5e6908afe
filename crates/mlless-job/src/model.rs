//! [`ModelChoice`]: which model a user asks for (`--model`), before the data set fixes its shape.

/// Which model to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelChoice {
    /// Sparse logistic regression (`lr`).
    LogisticRegression,
    /// Probabilistic matrix factorisation with biases (`pmf`).
    MatrixFactorization,
    /// Linear SVM, hinge loss (`svm`).
    Svm,
    /// k-means clustering by distributed Lloyd steps (`kmeans`).
    KMeans,
    /// A dense network with one or two hidden layers (`mlp`).
    Mlp,
}

impl ModelChoice {
    /// Every model, in the order `--help` lists them (each at its [`index`](Self::index)).
    pub const ALL: [ModelChoice; 5] = [
        Self::LogisticRegression,
        Self::MatrixFactorization,
        Self::Svm,
        Self::KMeans,
        Self::Mlp,
    ];

    /// Its place in [`ALL`](Self::ALL): an exhaustive match, so that a new model does not
    /// compile until it has a place here (and in `ALL`, checked by
    /// `mlless_core::assert_all_in_place!`).
    pub const fn index(self) -> usize {
        match self {
            Self::LogisticRegression => 0,
            Self::MatrixFactorization => 1,
            Self::Svm => 2,
            Self::KMeans => 3,
            Self::Mlp => 4,
        }
    }

    /// The name `--model` takes.
    pub fn name(&self) -> &'static str {
        match self {
            Self::LogisticRegression => "lr",
            Self::MatrixFactorization => "pmf",
            Self::Svm => "svm",
            Self::KMeans => "kmeans",
            Self::Mlp => "mlp",
        }
    }
}

mlless_core::assert_all_in_place!(ModelChoice);

impl ModelChoice {
    /// ISP's default significance V for this model (`--significance`), with `mlless train`'s
    /// default scale, [`SignificanceScale::Mean`](crate::SignificanceScale::Mean). Chosen to
    /// send at least 5 times fewer bytes than BSP at BSP's test metric (within 0.5%), 4 workers,
    /// the defaults otherwise: matrix factorisation at 4 (ml-latest-small: 5.5× fewer bytes,
    /// test RMSE +0.04%; MovieLens-100k-shaped ratings: 5.5×, +0.2%), sparse LR at 1 (a9a-shaped:
    /// 5.9×, test log loss +0.3%; web-shaped, 3% positive: 6.9×, −0.1%). SVM and the MLP take
    /// LR's, unmeasured; k-means does not filter.
    pub fn isp_significance(&self) -> f32 {
        match self {
            Self::MatrixFactorization => 4.0,
            Self::LogisticRegression | Self::Svm | Self::KMeans | Self::Mlp => 1.0,
        }
    }

    /// Whether the model trains by Lloyd steps (k-means): one step a pass over the data, whole
    /// minibatches a worker, a convergence tolerance, BSP and GA-SGD only.
    pub fn steps_by_lloyd(&self) -> bool {
        match self {
            Self::KMeans => true,
            Self::LogisticRegression | Self::MatrixFactorization | Self::Svm | Self::Mlp => false,
        }
    }

    /// Whether the driver scales the model's SGD-family rate with the global batch, bounded by
    /// the curvature of a sample of the data (`DataSample`): sparse logistic regression, whose
    /// defaults were measured so.
    pub fn scales_rate_with_batch(&self) -> bool {
        match self {
            Self::LogisticRegression => true,
            Self::MatrixFactorization | Self::Svm | Self::KMeans | Self::Mlp => false,
        }
    }

    /// Whether the model trains on ratings (a data set of `user item rating` triples) rather
    /// than on feature rows.
    pub fn trains_on_ratings(&self) -> bool {
        match self {
            Self::MatrixFactorization => true,
            Self::LogisticRegression | Self::Svm | Self::KMeans | Self::Mlp => false,
        }
    }

    /// The `--model` names of the models that train on ratings (`true`) or on feature rows
    /// (`false`), in [`ALL`](Self::ALL)'s order, as a sentence lists them: `lr, svm, kmeans or
    /// mlp`.
    pub fn names_training_on(ratings: bool) -> String {
        let names: Vec<&str> = Self::ALL
            .iter()
            .filter(|m| m.trains_on_ratings() == ratings)
            .map(|m| m.name())
            .collect();
        match names.split_last() {
            Some((last, [])) => (*last).to_owned(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }

    /// One line on what the model is, for `--help`.
    pub fn description(&self) -> &'static str {
        match self {
            Self::LogisticRegression => "Sparse logistic regression with L2 (log loss)",
            Self::MatrixFactorization => {
                "Probabilistic matrix factorisation with user and item biases (squared error)"
            }
            Self::Svm => "Linear support vector machine (hinge loss, L2)",
            Self::KMeans => {
                "k-means clustering (distributed Lloyd steps, k-means++ seeding; see --k, --tolerance)"
            }
            Self::Mlp => {
                "Dense network with one or two ReLU hidden layers, softmax cross-entropy (see \
                 --hidden, --classes)"
            }
        }
    }
}

impl ModelChoice {
    /// The choice that `spec` was built from.
    pub fn of(spec: &mlless_core::ModelSpec) -> Self {
        use mlless_core::ModelSpec;
        match spec {
            ModelSpec::LogisticRegression { .. } => Self::LogisticRegression,
            ModelSpec::MatrixFactorization { .. } => Self::MatrixFactorization,
            ModelSpec::Svm { .. } => Self::Svm,
            ModelSpec::KMeans { .. } => Self::KMeans,
            ModelSpec::Mlp { .. } => Self::Mlp,
        }
    }
}

impl std::fmt::Display for ModelChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A name `--model` does not take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown model {:?} (one of: {names})", .0, names = model_names())]
pub struct UnknownModel(pub String);

/// The names `--model` takes, for messages.
fn model_names() -> String {
    ModelChoice::ALL.map(|m| m.name()).join(", ")
}

impl std::str::FromStr for ModelChoice {
    type Err = UnknownModel;

    fn from_str(name: &str) -> Result<Self, UnknownModel> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or_else(|| UnknownModel(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_parses_from_its_name_and_nothing_else_does() {
        for model in ModelChoice::ALL {
            assert_eq!(model.name().parse::<ModelChoice>(), Ok(model));
        }
        let unknown = "LR".parse::<ModelChoice>();
        assert_eq!(unknown, Err(UnknownModel("LR".to_owned())));
        let message = unknown.map(|_| ()).unwrap_err().to_string();
        assert!(
            message.ends_with("(one of: lr, pmf, svm, kmeans, mlp)"),
            "{message}"
        );
    }

    #[test]
    fn the_models_of_rows_and_of_ratings_are_listed_as_a_sentence() {
        assert_eq!(
            ModelChoice::names_training_on(false),
            "lr, svm, kmeans or mlp"
        );
        assert_eq!(ModelChoice::names_training_on(true), "pmf");
    }
}
