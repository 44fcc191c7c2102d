// What n8n reads from the package: the entries in package.json load, and the
// outputs expression gives Claim its four outputs.
import { strict as assert } from 'assert';
import { test } from 'node:test';
import * as path from 'path';

import { Oncegate } from '../nodes/Oncegate/Oncegate.node';
import { OncegateTrigger } from '../nodes/OncegateTrigger/OncegateTrigger.node';

// eslint-disable-next-line @typescript-eslint/no-var-requires
const pkg = require('../package.json');

test('every node and credential named in package.json loads from dist', () => {
	const root = path.join(__dirname, '..', '..');
	for (const file of [...pkg.n8n.nodes, ...pkg.n8n.credentials]) {
		const loaded = require(path.join(root, file));
		const [cls] = Object.values(loaded) as Array<new () => object>;
		assert.ok(new cls(), file);
	}
	assert.ok(pkg.keywords.includes('n8n-community-node-package'));
});

function outputs(operation?: string): string[] {
	const expression = new Oncegate().description.outputs as string;
	const body = expression.slice('={{'.length, -'}}'.length);
	// eslint-disable-next-line @typescript-eslint/no-implied-eval
	const evaluate = new Function('$parameter', `return ${body};`);
	const parameter = operation === undefined ? {} : { operation };
	return (evaluate(parameter) as Array<{ displayName?: string }>).map((o) => o.displayName ?? 'main');
}

test('claim has four outputs, record model output two, the rest one', () => {
	assert.deepEqual(outputs(), ['Claimed', 'Duplicate', 'In Flight', 'Ended']);
	assert.deepEqual(outputs('claim'), ['Claimed', 'Duplicate', 'In Flight', 'Ended']);
	assert.deepEqual(outputs('recordOutput'), ['Valid', 'Invalid']);
	for (const op of ['complete', 'fail', 'renew', 'commit', 'requestApproval', 'reportFailedExecution']) {
		assert.deepEqual(outputs(op), ['main'], op);
	}
});

test('the trigger is a POST webhook with the signing credential', () => {
	const d = new OncegateTrigger().description;
	assert.equal(d.webhooks?.[0].httpMethod, 'POST');
	assert.deepEqual(d.credentials?.map((c) => c.name), ['oncegateSigningApi']);
	assert.deepEqual(new Oncegate().description.credentials?.map((c) => c.name), ['oncegateApi']);
});
