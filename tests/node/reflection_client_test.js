// Cross-language end-to-end test: a Node.js client that knows ledgerd only by address discovers
// ledger.v1.Ledger and grpc.health.v1.Health through server reflection (as grpcurl does), then
// calls them.
// Usage: node reflection_client_test.js PATH_TO_LEDGERD
'use strict';

const { execFileSync, spawn } = require('child_process');
const assert = require('assert');
const fs = require('fs');
const os = require('os');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const { GrpcReflection, serviceHelper } = require('grpc-js-reflection-client');

// How long ledgerd may take to write its --ports_file and answer SERVING.
const START_TIMEOUT_MS = 20000;

// True when grpc.health.v1.Health/Check at `target` answers SERVING. Called raw (an empty
// request; the answer is field 1 = 1, SERVING): the test resolves Health by reflection later on.
function isServing(target) {
  const client = new grpc.Client(target, grpc.credentials.createInsecure());
  return new Promise((resolve) => {
    client.makeUnaryRequest('/grpc.health.v1.Health/Check', (request) => request,
      (response) => response, Buffer.alloc(0), { deadline: new Date(Date.now() + 1000) },
      (error, response) => {
        client.close();
        resolve(!error && response.equals(Buffer.from([0x08, 0x01])));
      });
  });
}

// Starts ledgerd on a free port; resolves once its --ports_file names the port (never parsed
// from the start-up line, which is prose for people) and it answers SERVING.
async function startLedgerd(ledgerdPath, dataDir, portsFile) {
  const ledgerd = spawn(ledgerdPath, [
    '--listen=127.0.0.1:0', '--metrics_listen=', '--shards=2', `--data_dir=${dataDir}`,
    `--ports_file=${portsFile}`,
  ]);
  let output = '';
  let exited = false;
  ledgerd.stdout.on('data', (chunk) => { output += chunk; });
  ledgerd.stderr.on('data', (chunk) => { output += chunk; });
  ledgerd.on('exit', () => { exited = true; });
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline && !exited) {
    let ports = null;
    try {
      ports = JSON.parse(fs.readFileSync(portsFile, 'utf8'));  // Renamed into place whole.
    } catch (error) {
      if (error.code !== 'ENOENT') throw error;
    }
    if (ports !== null && ports.pid === ledgerd.pid) {
      const port = Number(ports.grpc.split(':').pop());
      if (await isServing(`127.0.0.1:${port}`)) return { ledgerd, port };
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  ledgerd.kill('SIGKILL');
  throw new Error(`ledgerd did not start (no ports file, or not SERVING, within ` +
    `${START_TIMEOUT_MS} ms): ${output}`);
}

function call(client, method, request) {
  return new Promise((resolve) => {
    const deadline = new Date(Date.now() + 10000);
    client[method](request, { deadline }, (error, response) => resolve({ error, response }));
  });
}

async function main() {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'ledgerd-node-test-'));
  const dataDir = path.join(scratch, 'data');
  // A new ledger, made the way an operator makes one.
  execFileSync(process.argv[2], ['init', `--data_dir=${dataDir}`], { stdio: 'ignore' });
  const { ledgerd, port } = await startLedgerd(process.argv[2], dataDir,
    path.join(scratch, 'ports.json'));
  const target = `127.0.0.1:${port}`;
  const results = { passed: 0, failed: 0 };
  const check = (name, test) => {
    try {
      test();
      results.passed++;
      console.log(`ok   ${name}`);
    } catch (error) {
      results.failed++;
      console.log(`FAIL ${name}: ${error.message}`);
    }
  };
  try {
    const reflection = new GrpcReflection(target, grpc.ChannelCredentials.createInsecure());
    const services = await reflection.listServices();
    check('reflection lists ledger.v1.Ledger', () => assert.ok(services.includes('ledger.v1.Ledger'), services));
    const methods = (await reflection.listMethods('ledger.v1.Ledger')).map((m) => m.name).sort();
    check('reflection lists its eight methods', () =>
      assert.deepStrictEqual(methods, ['Apply', 'Balance', 'Deposit', 'GetTransfer', 'History', 'Transfer', 'Watch', 'Withdraw']));

    const ledger = await serviceHelper({
      host: target,
      servicePath: 'ledger.v1.Ledger',
      credentials: grpc.ChannelCredentials.createInsecure(),
      proto_filename: 'ledger/v1/ledger.proto',
      protoLoaderOptions: { keepCase: true, longs: String, defaults: true },
    });
    const deposit = await call(ledger, 'Deposit', { account_id: 'node-alice', amount: 1500 });
    check('Deposit answers the new balance', () => {
      assert.ifError(deposit.error);
      assert.strictEqual(deposit.response.balance, '1500');
    });
    const withdraw = await call(ledger, 'Withdraw', { account_id: 'node-alice', amount: 400 });
    check('Withdraw answers the new balance', () => {
      assert.ifError(withdraw.error);
      assert.strictEqual(withdraw.response.balance, '1100');
    });
    const balance = await call(ledger, 'Balance', { account_id: 'node-alice' });
    check('Balance reads it', () => {
      assert.ifError(balance.error);
      assert.strictEqual(balance.response.balance, '1100');
    });
    const refused = await call(ledger, 'Withdraw', { account_id: 'node-alice', amount: 5000 });
    check('an overdraft is FAILED_PRECONDITION with the numbers', () => {
      assert.strictEqual(refused.error.code, grpc.status.FAILED_PRECONDITION);
      assert.strictEqual(refused.error.details,
        'insufficient funds: balance 1100, requested 5000, overdraft limit 0');
    });
    const missing = await call(ledger, 'Balance', { account_id: 'node-nobody' });
    check('an unknown account is NOT_FOUND', () =>
      assert.strictEqual(missing.error.code, grpc.status.NOT_FOUND));
    const invalid = await call(ledger, 'Deposit', { account_id: 'bad id', amount: 1 });
    check('a malformed id is INVALID_ARGUMENT', () =>
      assert.strictEqual(invalid.error.code, grpc.status.INVALID_ARGUMENT));
    const zero = await call(ledger, 'Deposit', { account_id: 'node-alice', amount: 0 });
    check('a zero amount is INVALID_ARGUMENT', () =>
      assert.strictEqual(zero.error.code, grpc.status.INVALID_ARGUMENT));
    const after = await call(ledger, 'Balance', { account_id: 'node-alice' });
    check('refused calls changed nothing', () => assert.strictEqual(after.response.balance, '1100'));

    // The health service is gRPC's own, not generated from a .proto, yet `grpcurl list` shows it:
    // resolve it by reflection alone (file_containing_symbol), as grpcurl does, and call it.
    const healthDescriptor = await reflection.getDescriptorBySymbol('grpc.health.v1.Health');
    const healthPackage = healthDescriptor.getPackageObject({ keepCase: true, enums: String, defaults: true });
    const health = new healthPackage.grpc.health.v1.Health(target, grpc.ChannelCredentials.createInsecure());
    const serving = await call(health, 'Check', { service: '' });
    check('grpc.health.v1.Health resolves by reflection and Check answers SERVING', () => {
      assert.ifError(serving.error);
      assert.strictEqual(serving.response.status, 'SERVING');
    });
    const ledgerHealth = await call(health, 'Check', { service: 'ledger.v1.Ledger' });
    check('Check of ledger.v1.Ledger answers SERVING', () => {
      assert.ifError(ledgerHealth.error);
      assert.strictEqual(ledgerHealth.response.status, 'SERVING');
    });
    health.close();
  } catch (error) {
    results.failed++;
    console.log(`FAIL unexpected: ${error.stack}`);
  } finally {
    const exited = new Promise((resolve) => ledgerd.on('exit', resolve));
    ledgerd.kill('SIGTERM');
    await exited;
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  console.log(`${results.passed} passed, ${results.failed} failed`);
  process.exit(results.failed === 0 ? 0 : 1);
}

main();
