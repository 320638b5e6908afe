//! `mlless export`: a trained model as named tensors in a safetensors file.
//!
//! | model | tensors (all `F32` unless said) |
//! | --- | --- |
//! | lr, svm | `weights` [F], `bias` [1] |
//! | pmf | `user_factors` [U, K], `item_factors` [I, K], `user_bias` [U], `item_bias` [I], `global_mean` [1]; `user_ids` [U] and `item_ids` [I] (`I64`, the original ids, ascending: row `u` of `user_factors` is user `user_ids[u]`) |
//! | kmeans | `centroids` [k, F] |
//! | mlp | `layer{n}.weight` [in, out] and `layer{n}.bias` [out] for each layer from the input, `h = relu(x @ W + b)` on the hidden layers, softmax of the last |
//!
//! A min-max normalised data set adds `normalization_min` and `normalization_max` [F]. The
//! `__metadata__` map holds `format` (`mlless`), `model` (its short name), `spec` (the model's
//! spec as JSON: shapes and hyper-parameters), `tensors` (name → shape, JSON), `label_map`
//! (JSON, or `null`), `normalization`, `ids`, `feature_index_base` (`0` or `1`: how input
//! feature indices count), `metrics` (the run record's test metrics, JSON) and `data_url`.

use std::collections::{BTreeMap, HashMap};

use mlless_core::ModelSpec;
use safetensors::{Dtype, tensor::TensorView};

use crate::error::Result;
use crate::predict::TrainedModel;

/// One tensor to write: name, dtype, shape, little-endian bytes.
struct Tensor {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

fn f32s(name: impl Into<String>, shape: Vec<usize>, values: &[f32]) -> Tensor {
    Tensor {
        name: name.into(),
        dtype: Dtype::F32,
        shape,
        bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

fn i64s(name: impl Into<String>, values: &[u32]) -> Tensor {
    Tensor {
        name: name.into(),
        dtype: Dtype::I64,
        shape: vec![values.len()],
        bytes: values
            .iter()
            .flat_map(|&v| i64::from(v).to_le_bytes())
            .collect(),
    }
}

/// The model's parameters as named tensors (see the module doc).
fn tensors(model: &TrainedModel) -> Result<Vec<Tensor>> {
    let params = &model.model.params;
    let spec = &model.model.spec;
    if params.len() != spec.num_params() {
        return Err(crate::Mismatch::ParameterCount {
            model_url: model.model_url.to_string(),
            found: params.len(),
            model: spec.name(),
            expected: spec.num_params(),
        }
        .into());
    }
    let mut out: Vec<Tensor> = spec
        .parameter_blocks()
        .into_iter()
        .map(|block| f32s(block.name, block.shape, &params[block.range]))
        .collect();
    if let ModelSpec::MatrixFactorization { mean, .. } = *spec {
        out.push(f32s("global_mean", vec![1], &[mean]));
        if let Some(ids) = &model.ids {
            out.push(i64s("user_ids", &ids.users));
            out.push(i64s("item_ids", &ids.items));
        }
    }
    if let Some(n) = &model.manifest.normalization {
        out.push(f32s("normalization_min", vec![n.min.len()], &n.min));
        out.push(f32s("normalization_max", vec![n.max.len()], &n.max));
    }
    Ok(out)
}

/// The safetensors file of a trained model (see the module doc).
pub fn export_safetensors(model: &TrainedModel) -> Result<Vec<u8>> {
    let tensors = tensors(model)?;
    let shapes: BTreeMap<&str, &[usize]> = tensors
        .iter()
        .map(|t| (t.name.as_str(), t.shape.as_slice()))
        .collect();
    let metrics = model
        .record
        .as_ref()
        .map(|r| r.metrics.clone())
        .unwrap_or_default();
    let schema = model.manifest.schema.clone().unwrap_or_default();
    let mut metadata = HashMap::new();
    metadata.insert("format".to_string(), "mlless".to_string());
    metadata.insert("model".to_string(), model.model.spec.name().to_string());
    metadata.insert("spec".to_string(), json(&model.model.spec));
    metadata.insert("tensors".to_string(), json(&shapes));
    metadata.insert("label_map".to_string(), json(&model.manifest.label_map));
    metadata.insert(
        "normalization".to_string(),
        match &model.manifest.normalization {
            Some(_) => "minmax: x' = (x - normalization_min) / (normalization_max - \
                        normalization_min) on the stored entries, 0 where max <= min"
                .to_string(),
            None => "none".to_string(),
        },
    );
    metadata.insert(
        "ids".to_string(),
        if model.ids.is_some() {
            "user_ids, item_ids: the original ids, ascending; row u of user_factors is user \
             user_ids[u]"
                .to_string()
        } else {
            "none".to_string()
        },
    );
    metadata.insert(
        "feature_index_base".to_string(),
        if schema.zero_based { "0" } else { "1" }.to_string(),
    );
    metadata.insert("metrics".to_string(), json(&metrics));
    metadata.insert(
        "data_url".to_string(),
        mlless_store::redact_url(&model.data_url),
    );
    let views = tensors
        .iter()
        .map(|t| {
            TensorView::new(t.dtype, t.shape.clone(), &t.bytes).map(|view| (t.name.clone(), view))
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|source| crate::Internal::Safetensors {
            doing: "building",
            source,
        })?;
    safetensors::serialize(views, Some(metadata)).map_err(|source| {
        crate::Internal::Safetensors {
            doing: "writing",
            source,
        }
        .into()
    })
}

/// `value` as JSON text, for the metadata.
fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("\"unserialisable: {e}\""))
}

#[cfg(test)]
mod tests {
    use mlless_data::{
        BatchInfo, DatasetKind, IdMap, MANIFEST_VERSION, Manifest, SourceInfo, SplitInfo,
    };
    use safetensors::SafeTensors;

    use super::*;
    use crate::messages::StoredModel;

    fn trained(spec: ModelSpec, kind: DatasetKind, ids: Option<IdMap>) -> TrainedModel {
        let params = (0..spec.num_params()).map(|i| i as f32).collect();
        let mut train = SplitInfo::default();
        train.push(BatchInfo::new("train/000000.bin".into(), 1, b""));
        TrainedModel {
            model_url: "memory://t/model.bin".into(),
            model: StoredModel { spec, params },
            spec: None,
            record: None,
            data_url: "memory://t".into(),
            manifest: Manifest {
                format_version: MANIFEST_VERSION,
                dataset_id: None,
                kind,
                batch_size: 1,
                train,
                test: SplitInfo::default(),
                validation: SplitInfo::default(),
                normalization: None,
                label_map: None,
                labels: None,
                source: SourceInfo {
                    format: "test".into(),
                    input: "test".into(),
                    seed: 0,
                    test_fraction: None,
                    validation_fraction: None,
                },
                created_unix_s: 0,
                schema: None,
                rating_counts: None,
            },
            ids,
        }
    }

    /// The tensors' values, concatenated in the order given, as f32.
    fn concat(bytes: &[u8], names: &[&str]) -> Vec<f32> {
        let file = SafeTensors::deserialize(bytes).unwrap();
        names
            .iter()
            .flat_map(|n| {
                let t = file.tensor(n).unwrap();
                assert_eq!(t.dtype(), Dtype::F32, "{n}");
                t.data()
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn shape(bytes: &[u8], name: &str) -> Vec<usize> {
        SafeTensors::deserialize(bytes)
            .unwrap()
            .tensor(name)
            .unwrap()
            .shape()
            .to_vec()
    }

    #[test]
    fn the_tensors_cut_the_flat_parameters_in_layout_order() {
        let spec = ModelSpec::Mlp {
            features: 5,
            hidden: vec![4, 3],
            classes: 2,
            l2: 0.0,
        };
        let model = trained(spec, DatasetKind::Sparse { features: 5 }, None);
        let bytes = export_safetensors(&model).unwrap();
        let names = [
            "layer0.weight",
            "layer0.bias",
            "layer1.weight",
            "layer1.bias",
            "layer2.weight",
            "layer2.bias",
        ];
        assert_eq!(concat(&bytes, &names), model.model.params);
        assert_eq!(shape(&bytes, "layer0.weight"), vec![5, 4]);
        assert_eq!(shape(&bytes, "layer2.weight"), vec![3, 2]);
        let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
        let meta = meta.metadata().clone().unwrap();
        assert_eq!(meta["model"], "mlp");
        assert!(
            meta["spec"].contains("\"hidden\":[4,3]"),
            "{}",
            meta["spec"]
        );

        let spec = ModelSpec::MatrixFactorization {
            users: 3,
            items: 2,
            factors: 2,
            l2: 0.0,
            mean: 3.5,
            init_std: 0.1,
            prior: 0.0,
        };
        let kind = DatasetKind::Ratings {
            users: 3,
            items: 2,
            mean: 3.5,
        };
        let ids = IdMap {
            users: vec![7, 1007, 2007],
            items: vec![5, 999_999],
        };
        let model = trained(spec, kind, Some(ids));
        let bytes = export_safetensors(&model).unwrap();
        let names = ["user_factors", "item_factors", "user_bias", "item_bias"];
        assert_eq!(concat(&bytes, &names), model.model.params);
        assert_eq!(concat(&bytes, &["global_mean"]), vec![3.5]);
        assert_eq!(shape(&bytes, "item_factors"), vec![2, 2]);
        let file = SafeTensors::deserialize(&bytes).unwrap();
        let items: Vec<i64> = file
            .tensor("item_ids")
            .unwrap()
            .data()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(items, vec![5, 999_999]);

        let spec = ModelSpec::KMeans { features: 3, k: 2 };
        let model = trained(spec, DatasetKind::Sparse { features: 3 }, None);
        let bytes = export_safetensors(&model).unwrap();
        assert_eq!(concat(&bytes, &["centroids"]), model.model.params);
        assert_eq!(shape(&bytes, "centroids"), vec![2, 3]);
    }
}
