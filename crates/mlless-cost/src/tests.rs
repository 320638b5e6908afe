//! Tests of the price tables, bills and projections of this crate.

use super::*;

#[test]
fn durations_round_up_to_granularity() {
    assert_eq!(billed_duration_ms(1, 100), 100);
    assert_eq!(billed_duration_ms(100, 100), 100);
    assert_eq!(billed_duration_ms(101, 100), 200);
    assert_eq!(billed_duration_ms(0, 1), 1);
    assert_eq!(billed_duration_ms(1234, 1), 1234);
}

#[test]
fn ibm_bills_more_than_aws_for_short_invocations() {
    let short = [Usage {
        duration_ms: 120,
        memory_mb: 2048,
    }; 10];
    let aws = PriceTable::aws_lambda().bill(&short, 1.0, ObjectRequests::default());
    let ibm = PriceTable::ibm_cloud_functions().bill(&short, 1.0, ObjectRequests::default());
    assert_eq!(aws.billed_ms, 1200);
    assert_eq!(ibm.billed_ms, 2000);
    assert!((ibm.gb_seconds - 4.0).abs() < 1e-9);
    assert!(ibm.compute_usd > aws.compute_usd);
}

#[test]
fn granularity_1ms_versus_100ms_on_the_same_durations() {
    let durations = [1u64, 99, 100, 101, 250, 1001];
    let usages: Vec<Usage> = durations
        .iter()
        .map(|&d| Usage {
            duration_ms: d,
            memory_mb: 1024,
        })
        .collect();
    let mut fine = PriceTable::aws_lambda();
    fine.request_usd = 0.0;
    let mut coarse = fine.clone();
    coarse.granularity_ms = 100;
    let none = ObjectRequests::default();
    let a = fine.bill(&usages, 0.0, none);
    let b = coarse.bill(&usages, 0.0, none);
    assert_eq!(a.billed_ms, durations.iter().sum::<u64>());
    assert_eq!(b.billed_ms, 100 + 100 + 100 + 200 + 300 + 1100);
    assert!((a.gb_seconds - a.billed_ms as f64 / 1000.0).abs() < 1e-12);
    assert!((b.compute_usd / a.compute_usd - b.billed_ms as f64 / a.billed_ms as f64).abs() < 1e-9);
    // One invocation: the same rounding as the bill.
    let one = Usage {
        duration_ms: 101,
        memory_mb: 512,
    };
    assert!((coarse.invocation_usd(one) - 0.2 * 0.5 * coarse.gb_second_usd).abs() < 1e-15);
}

#[test]
fn a_bill_of_many_is_the_bill_of_the_list_without_it() {
    let prices = PriceTable::ibm_cloud_functions().with_services(0.17);
    let usage = Usage {
        duration_ms: 1234,
        memory_mb: 768,
    };
    let requests = ObjectRequests {
        writes: 30,
        reads: 700,
        table_write_units: 5000,
        table_read_units: 9000,
    };
    let listed = prices.bill(&[usage; 9], 60.0, requests);
    let many = prices.bill_of_many(usage, 9, 60.0, requests);
    assert_eq!(many.invocations, listed.invocations);
    assert_eq!(many.billed_ms, listed.billed_ms);
    for (a, b) in [
        (many.gb_seconds, listed.gb_seconds),
        (many.compute_usd, listed.compute_usd),
        (many.request_usd, listed.request_usd),
        (many.total_usd, listed.total_usd),
    ] {
        assert!((a - b).abs() <= 1e-12 * b.abs(), "{a} vs {b}");
    }
    // A fleet of 2^32 functions is billed without a list of them.
    let huge = prices.bill_of_many(usage, u64::from(u32::MAX), 60.0, requests);
    assert_eq!(huge.invocations, u64::from(u32::MAX));
    assert!(huge.total_usd.is_finite() && huge.total_usd > many.total_usd);
}

#[test]
fn bill_adds_every_part() {
    let prices = PriceTable::aws_lambda().with_services(0.17);
    let requests = ObjectRequests {
        writes: 2000,
        reads: 10_000,
        table_write_units: 2_000_000,
        table_read_units: 8_000_000,
    };
    let bill = prices.bill(
        &[Usage {
            duration_ms: 1000,
            memory_mb: 1024,
        }],
        3600.0,
        requests,
    );
    let expected_storage = 2.0 * 0.005 + 10.0 * 0.0004;
    assert!((bill.storage_usd - expected_storage).abs() < 1e-12);
    assert!((bill.services_usd - 0.17).abs() < 1e-12);
    assert!((bill.request_usd - 0.2e-6).abs() < 1e-15);
    // DynamoDB on demand: $0.625 a million write units, $0.125 a million read units.
    assert!((bill.table_usd - (2.0 * 0.625 + 8.0 * 0.125)).abs() < 1e-12);
    let sum =
        bill.compute_usd + bill.request_usd + bill.services_usd + bill.storage_usd + bill.table_usd;
    assert!((bill.total_usd - sum).abs() < 1e-15);
    assert_eq!(
        PriceTable::by_name("aws-lambda"),
        Some(PriceTable::aws_lambda())
    );
    assert_eq!(PriceTable::by_name("azure"), None);
}

#[test]
fn channel_services_are_billed_per_instance() {
    // Which kind a channel URL is billed as: `mlless_job::billing::channel_kind`'s tests.
    let aws = PriceTable::aws_lambda();
    let redis = aws.clone().for_channel(ChannelKind::Redis { instances: 2 });
    assert!((redis.services_usd_per_hour - 0.34).abs() < 1e-12);
    let bill = redis.bill(&[], 1800.0, ObjectRequests::default());
    assert!((bill.services_usd - 0.17).abs() < 1e-12);
    let store = aws.clone().for_channel(ChannelKind::ObjectStore);
    assert_eq!(store, aws);
    let ps = aws
        .clone()
        .for_channel(ChannelKind::ParameterServer { instances: 2 });
    assert!((ps.services_usd_per_hour - 2.0 * PS_USD_PER_HOUR).abs() < 1e-12);
}

#[test]
fn step_cost_bills_a_step_as_the_bill_does() {
    let aws = PriceTable::aws_lambda();
    for channel in [
        ChannelKind::ObjectStore,
        ChannelKind::Redis { instances: 2 },
    ] {
        let model = aws.step_cost(channel, 1024);
        for p in [1u32, 4, 8] {
            // One step of p workers lasting 1 s, billed by the run's own bill.
            let usage = vec![
                Usage {
                    duration_ms: 1000,
                    memory_mb: 1024,
                };
                p as usize
            ];
            let bill = aws.clone().for_channel(channel).bill(
                &usage,
                1.0,
                ObjectRequests::estimate(channel, p, 1),
            );
            let billed = bill.total_usd - bill.request_usd;
            assert!(
                (model.step_usd(p, 1.0) - billed).abs() < 1e-12,
                "{channel:?} p = {p}"
            );
        }
    }
}

#[test]
fn object_requests_are_billed_and_estimated() {
    let aws = PriceTable::aws_lambda();
    let est = ObjectRequests::estimate(ChannelKind::ObjectStore, 4, 10);
    // Per step: 4 × (update PUT + stats PUT); 4 × (minibatch GET + 4 update GETs) + 4
    // supervisor GETs. DELETEs are not billed.
    assert_eq!(est.writes, 10 * 8);
    assert_eq!(est.reads, 10 * (20 + 4));
    let redis = ObjectRequests::estimate(ChannelKind::Redis { instances: 1 }, 4, 10);
    assert_eq!(
        redis,
        ObjectRequests {
            writes: 0,
            reads: 40,
            ..ObjectRequests::default()
        }
    );
    // On DynamoDB a write and a read unit per worker and step, at least, and no server.
    let dynamodb = ObjectRequests::estimate(ChannelKind::DynamoDb, 4, 10);
    assert_eq!(
        (dynamodb.table_write_units, dynamodb.table_read_units),
        (40, 40)
    );
    assert_eq!(aws.channel_usd_per_hour(ChannelKind::DynamoDb), 0.0);
    let bill = aws.bill(&[], 0.0, est);
    let expected = 80.0 / 1000.0 * 0.005 + 240.0 / 1000.0 * 0.0004;
    assert!((bill.storage_usd - expected).abs() < 1e-15);
    let mut sum = est;
    sum += redis;
    assert_eq!(sum.reads, 280);
}

#[test]
fn toml_round_trip() {
    for table in [
        PriceTable::aws_lambda(),
        PriceTable::ibm_cloud_functions().with_services(RABBITMQ_USD_PER_HOUR),
    ] {
        let text = table.to_toml_string();
        assert!(text.contains("gb_second_usd"), "{text}");
        assert_eq!(PriceTable::from_toml_str(&text).unwrap(), table);
    }
}

#[test]
fn toml_defaults_optional_prices_to_zero() {
    let t =
        PriceTable::from_toml_str("name = \"x\"\ngb_second_usd = 0.00001\ngranularity_ms = 100\n")
            .unwrap();
    assert_eq!(t.request_usd, 0.0);
    assert_eq!(t.redis_usd_per_hour, 0.0);
    assert_eq!(t.granularity_ms, 100);
}

#[test]
fn bad_toml_names_what_is_wrong() {
    let err = |text: &str| PriceTable::from_toml_str(text).unwrap_err().to_string();
    let missing = err("name = \"x\"\ngb_second_usd = 0.00001\n");
    assert!(missing.contains("granularity_ms"), "{missing}");
    let typo = err("name = \"x\"\ngb_secnd_usd = 0.1\ngb_second_usd = 0.1\ngranularity_ms = 1\n");
    assert!(typo.contains("gb_secnd_usd"), "{typo}");
    let wrong_type = err("name = \"x\"\ngb_second_usd = \"cheap\"\ngranularity_ms = 1\n");
    assert!(wrong_type.contains("gb_second_usd"), "{wrong_type}");
    let syntax = err("name = \"x\ngb_second_usd = 1\n");
    assert!(syntax.starts_with("invalid price table"), "{syntax}");
    let negative = err("name = \"x\"\ngb_second_usd = -1.0\ngranularity_ms = 1\n");
    assert!(negative.contains("gb_second_usd = -1"), "{negative}");
    let zero = err("name = \"x\"\ngb_second_usd = 1.0\ngranularity_ms = 0\n");
    assert!(zero.contains("granularity_ms"), "{zero}");
    let nan = err("name = \"x\"\ngb_second_usd = nan\ngranularity_ms = 1\n");
    assert!(nan.contains("gb_second_usd"), "{nan}");
}
