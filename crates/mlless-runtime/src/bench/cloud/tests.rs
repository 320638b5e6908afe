//! Tests of the cloud simulation: latencies, patterns, bills.

use super::*;

fn case(cloud: CloudLatency, workers: u32, pattern: Pattern, rule: UpdateRule) -> CloudCase {
    CloudCase {
        cloud,
        workers,
        pattern,
        rule,
        steps: 3,
        memory_mb: 1024,
    }
}

#[test]
fn update_rules_parse() {
    assert_eq!(UpdateRule::parse("bsp"), Ok(UpdateRule::Bsp));
    assert_eq!(UpdateRule::parse("isp"), Ok(UpdateRule::Isp(0.7)));
    assert_eq!(UpdateRule::parse("isp:0.1"), Ok(UpdateRule::Isp(0.1)));
    assert_eq!(
        UpdateRule::parse("topk:0.01"),
        Ok(UpdateRule::Compressed(Compression::TopKFraction(0.01)))
    );
    assert!(UpdateRule::parse("isp:-1").is_err());
    assert!(UpdateRule::parse("fast").unwrap_err().contains("bsp, isp"));
}

/// The simulated step is the cloud's latency of the requests the protocol makes, plus
/// compute: a broadcast step is a publish and a collect (two requests; the deletion of the
/// step before the last runs alongside) as long as a collect's reads fit one round; an
/// all-reduce step adds the leader's round (collect, and publish of the mean) to everyone's
/// wait.
#[test]
fn a_step_takes_the_requests_of_its_protocol() {
    let data = CloudData::generate(CloudJob::SparseLr, 1).expect("data");
    let slow = CloudLatency {
        name: "slow".into(),
        request_ms: 50.0,
        mb_per_s: 1e6,
        reads_at_once: Some(32),
    };
    let prices = PriceTable::aws_lambda();
    let bsp = simulate(
        &data,
        &case(slow.clone(), 4, Pattern::Broadcast, UpdateRule::Bsp),
        &prices,
    )
    .expect("simulate");
    assert!(
        bsp.step_ms >= 100.0 && bsp.step_ms < 110.0,
        "a broadcast step of 2 requests of 50 ms took {} ms",
        bsp.step_ms
    );
    let wide = simulate(
        &data,
        &case(slow.clone(), 40, Pattern::Broadcast, UpdateRule::Bsp),
        &prices,
    )
    .expect("simulate");
    assert!(
        wide.step_ms >= 150.0 && wide.step_ms < 165.0,
        "40 messages are read in 2 rounds of 32: 3 requests, took {} ms",
        wide.step_ms
    );
    let reduce = simulate(
        &data,
        &case(slow, 4, Pattern::AllReduce, UpdateRule::Bsp),
        &prices,
    )
    .expect("simulate");
    assert!(
        reduce.step_ms >= 200.0 && reduce.step_ms < 215.0,
        "all-reduce: publish, the leader's collect and publish, everyone's collect: \
         4 requests, took {} ms",
        reduce.step_ms
    );
    // A step of P workers is billed P workers' time and the protocol's requests: broadcast
    // reads every message, P² GETs a step, plus P minibatch GETs.
    assert!(wide.requests_per_step >= 40.0 * 40.0 + 40.0);
    assert!(wide.usd_per_step > 9.0 * bsp.usd_per_step);
}

/// On DynamoDB's latency a step is billed DynamoDB's request units, not a server's hours:
/// at $1 a unit and every other price 0, a broadcast step of P workers costs at least P
/// write units (each publishes its update) and P read units (each collects the step), and
/// the same latency under another name (a server) costs nothing.
#[test]
fn dynamodb_is_billed_by_request_units() {
    let data = CloudData::generate(CloudJob::SparseLr, 2).expect("data");
    let prices = PriceTable {
        name: "units only".into(),
        gb_second_usd: 0.0,
        granularity_ms: 1,
        request_usd: 0.0,
        services_usd_per_hour: 0.0,
        redis_usd_per_hour: 0.0,
        memcached_usd_per_hour: 0.0,
        ps_usd_per_hour: 0.0,
        object_write_usd_per_1000: 0.0,
        object_read_usd_per_1000: 0.0,
        dynamodb_write_usd_per_million: 1e6,
        dynamodb_read_usd_per_million: 1e6,
    };
    let run = |cloud| {
        let mut case = case(cloud, 4, Pattern::Broadcast, UpdateRule::Bsp);
        case.steps = 3;
        simulate(&data, &case, &prices).expect("simulate")
    };
    let dynamodb = run(CloudLatency::dynamodb());
    assert!(dynamodb.usd_per_step >= 8.0, "{}", dynamodb.usd_per_step);
    let server = run(CloudLatency {
        name: "a server".into(),
        ..CloudLatency::dynamodb()
    });
    assert_eq!(server.usd_per_step, 0.0);
}

/// Top-k sends less than BSP; under ISP sparse LR's workers still learn: the loss falls
/// below the log loss of a coin (0.693) within a few steps.
#[test]
fn filters_send_less_and_still_learn() {
    let data = CloudData::generate(CloudJob::Pmf, 2).expect("data");
    let cloud = CloudLatency::elasticache();
    let prices = PriceTable::aws_lambda();
    let run = |rule| {
        let mut case = case(cloud.clone(), 4, Pattern::Broadcast, rule);
        case.steps = 10;
        simulate(&data, &case, &prices).expect("simulate")
    };
    let bsp = run(UpdateRule::Bsp);
    let topk = run(UpdateRule::Compressed(Compression::TopKFraction(0.1)));
    assert!(
        topk.sent_bytes < 0.3 * bsp.sent_bytes,
        "top-10% sent {} bytes a step against BSP's {}",
        topk.sent_bytes,
        bsp.sent_bytes
    );
    assert!(bsp.loss.is_finite() && topk.loss.is_finite());
    // ElastiCache is billed by the hour, not by request.
    let lr = CloudData::generate(CloudJob::SparseLr, 2).expect("data");
    let mut lr_case = case(cloud, 4, Pattern::Broadcast, UpdateRule::Isp(0.7));
    lr_case.steps = 10;
    let isp = simulate(&lr, &lr_case, &prices).expect("simulate");
    assert!(
        isp.loss < 0.693 && isp.loss < isp.first_loss,
        "ISP's loss after 12 steps: {}, at the first {}",
        isp.loss,
        isp.first_loss
    );
}

/// With the defaults, no model of the sweep diverges in a fleet of 64, and the linear
/// models and the MLP learn: their loss falls. (PMF's Adam steps, averaged over 64 workers
/// of which one touched a user, move its factors a 64th of one worker's step: 22 steps
/// leave its loss within the noise of 62-rating shares.)
#[test]
fn every_model_learns_at_sixty_four_workers_with_the_defaults() {
    let prices = PriceTable::aws_lambda();
    for job in [
        CloudJob::SparseLr,
        CloudJob::Svm,
        CloudJob::Mlp,
        CloudJob::Pmf,
    ] {
        let data = CloudData::generate(job, 3).expect("data");
        let mut case = case(
            CloudLatency::elasticache(),
            64,
            Pattern::AllReduce,
            UpdateRule::Bsp,
        );
        case.steps = 20;
        let report = simulate(&data, &case, &prices).expect("simulate");
        assert!(
            !report.diverging() && (job == CloudJob::Pmf || report.loss < report.first_loss),
            "{}: loss {} after 22 steps, {} at the first",
            job.name(),
            report.loss,
            report.first_loss
        );
    }
}
