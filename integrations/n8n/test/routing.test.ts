// Every claim answer leaves by exactly one output, and problems read as
// their title and detail.
import { strict as assert } from 'assert';
import { test } from 'node:test';

import { problemText, sanitiseError } from '../nodes/Oncegate/problem';
import { CLAIM_OUTPUTS, claimOutput, type ClaimAnswer } from '../nodes/Oncegate/routing';
import { findRun, withRun } from '../nodes/Oncegate/run';
import { effects } from '../nodes/Oncegate/effects';

test('each claim answer has one output', () => {
	const cases: Array<[ClaimAnswer, string]> = [
		[{ claimed: true, state: 'processing', lease: 'l1' }, 'Claimed'],
		[{ claimed: true, reclaimed: true, state: 'processing' }, 'Claimed'],
		[{ claimed: false, duplicate: true, state: 'completed', result: { a: 1 } }, 'Duplicate'],
		[{ claimed: false, duplicate: false, state: 'approved', result: { a: 1 } }, 'Duplicate'],
		[{ claimed: false, state: 'processing', duplicate_of: { namespace: 'n', key: 'k' } }, 'Duplicate'],
		[{ claimed: false, state: 'processing', retry_after: 3 }, 'In Flight'],
		[{ claimed: false, state: 'awaiting_human' }, 'In Flight'],
		[{ claimed: false, state: 'failed_terminal', reason: 'x' }, 'Ended'],
		[{ claimed: false, state: 'dead_lettered' }, 'Ended'],
		[{ claimed: false, state: 'a state added later' }, 'Ended'],
	];
	for (const [answer, output] of cases) {
		assert.equal(CLAIM_OUTPUTS[claimOutput(answer)], output, JSON.stringify(answer));
	}
});

test('a problem document becomes its title and detail', () => {
	const text = problemText(409, {
		type: 'urn:oncegate:problem:lease-lost',
		title: 'Conflict',
		status: 409,
		detail: 'the lease expired or another owner holds the run',
		state: 'processing',
	});
	assert.equal(text.message, 'Conflict: lease-lost (409)');
	assert.equal(text.description, 'the lease expired or another owner holds the run The run is processing.');
	assert.equal(text.httpCode, '409');
	const invalid = problemText(422, {
		title: 'Invalid model output',
		detail: '1 violation',
		violations: [{ path: '/reply', message: 'is required' }],
	});
	assert.match(invalid.description, /\/reply: is required/);
	const field = problemText(400, { title: 'Bad Request', detail: 'unknown target', field: 'effects[0].target' });
	assert.equal(field.message, 'Bad Request (400)');
	assert.match(field.description, /Field: effects\[0\]\.target\./);
	// Not a problem document: still says what happened, never just a number.
	const bare = problemText(502, '<html>Bad gateway</html>');
	assert.match(bare.message, /502 without a problem document/);
	assert.match(bare.description, /Bad gateway/);
});

test('errors are cut and cleaned before they are stored', () => {
	assert.equal(sanitiseError('line 1\nline\t2\u0000'), 'line 1 line 2');
	assert.equal(sanitiseError(new Error('boom')), 'boom');
	assert.equal(sanitiseError({ message: 'from n8n' }), 'from n8n');
	assert.equal(sanitiseError(''), 'failed without a message');
	assert.equal(sanitiseError('x'.repeat(5000)).length, 1000);
});

test('the run travels in the item, or is found upstream, nearest first', () => {
	const run = { namespace: 'orders', key: 'k1', lease: 'l1_a' };
	assert.deepEqual(findRun({ oncegate: run, other: 1 }, []), run);
	const later = { namespace: 'orders', key: 'k1', lease: 'l1_b' };
	const upstream = [
		() => ({ unrelated: true }),
		() => {
			throw new Error('that node did not run for this item');
		},
		() => ({ oncegate: later }),
		() => ({ oncegate: run }),
	];
	assert.deepEqual(findRun({ replaced: 'by an HTTP Request' }, upstream), later);
	assert.equal(findRun({}, []), undefined);
	// A run whose lease ended (after a complete) is not an owner's run.
	assert.equal(findRun({ oncegate: { ...run, lease: null } }, []), undefined);
	const moved = withRun({ a: 1, oncegate: { ...run, claimed: true } }, { state: 'completed', lease: null }, run);
	assert.deepEqual(moved, { a: 1, oncegate: { ...run, claimed: true, state: 'completed', lease: null } });
});

test('effects from fields or JSON', () => {
	const fromFields = effects(
		'fields',
		[{ operation: 'create_shipment', effectType: 'shipment', target: 'warehouse', path: '/s', method: 'POST', body: '{"a":1}', headers: '{}' }],
		undefined,
	);
	assert.deepEqual(fromFields, [
		{ operation: 'create_shipment', effect_type: 'shipment', target: 'warehouse', path: '/s', body: { a: 1 } },
	]);
	assert.throws(() => effects('fields', [{ operation: 'x', target: 't' }], undefined), /Effect 1: Effect Type is required/);
	assert.deepEqual(
		effects('fields', [{ operation: 'o', effectType: 'e', target: 't', externalId: '/id' }, { operation: 'o', effectType: 'f', target: 't', externalId: 'X-Message-Id' }], undefined).map((e) => e.external_id),
		[{ pointer: '/id' }, { header: 'X-Message-Id' }],
	);
	assert.deepEqual(effects('json', [], '[{"operation":"o"}]'), [{ operation: 'o' }]);
	assert.throws(() => effects('json', [], '{"operation":"o"}'), /must be an array/);
	assert.throws(() => effects('fields', [{ operation: 'o', effectType: 'e', target: 't', body: '{bad' }], undefined), /Body is not valid JSON/);
});
