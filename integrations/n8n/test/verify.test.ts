// The trigger's verification against the official Standard Webhooks signer
// (the npm registry's `standardwebhooks`), and the failures it must refuse.
import { strict as assert } from 'assert';
import { test } from 'node:test';
import { Webhook } from 'standardwebhooks';

import { parseSecrets, verify } from '../nodes/OncegateTrigger/verify';

const OLD = `whsec_${Buffer.from('the old signing key, 32 bytes!!!').toString('base64')}`;
const NEW = `whsec_${Buffer.from('the new signing key, 32 bytes!!!').toString('base64')}`;
const BODY = '{"id":"evt_1","order_id":"1042","note":"ünïcode ✓"}';

function signed(secret: string, id: string, at: Date, body = BODY) {
	const signature = new Webhook(secret).sign(id, at, body);
	return {
		'webhook-id': id,
		'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
		'webhook-signature': signature,
	};
}

const now = () => Math.floor(Date.now() / 1000);

test('a delivery signed by the official signer verifies', () => {
	const headers = signed(NEW, 'shop:evt_1:forward', new Date());
	const verdict = verify([NEW], headers, Buffer.from(BODY), now());
	assert.deepEqual(verdict.ok, true);
	assert.equal(verdict.ok && verdict.id, 'shop:evt_1:forward');
});

test('the published example of the specification verifies at its time', () => {
	const headers = {
		'webhook-id': 'msg_p5jXN8AQM9LWM0D4loKWxJek',
		'webhook-timestamp': '1614265330',
		'webhook-signature': 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
	};
	const body = Buffer.from('{"test": 2432232314}');
	assert.equal(verify(['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'], headers, body, 1614265330).ok, true);
});

test('during a rotation either secret verifies, in either header order', () => {
	const at = new Date();
	const a = signed(OLD, 'id-1', at);
	const b = signed(NEW, 'id-1', at);
	const both = { ...a, 'webhook-signature': `${a['webhook-signature']} ${b['webhook-signature']}` };
	for (const secrets of [[OLD], [NEW], [NEW, OLD], parseSecrets(`${OLD}, ${NEW}`)]) {
		assert.equal(verify(secrets, both, Buffer.from(BODY), now()).ok, true, secrets.join(' '));
	}
	// A receiver that already dropped the old secret refuses what only the old one signed.
	assert.equal(verify([NEW], a, Buffer.from(BODY), now()).ok, false);
});

test('a refused delivery says why', () => {
	const at = new Date();
	const good = signed(NEW, 'id-2', at);
	const cases: Array<[string, Record<string, string | undefined>, string, string[]]> = [
		['another secret', good, BODY, [OLD]],
		['a changed body', good, `${BODY} `, [NEW]],
		['a changed id', { ...good, 'webhook-id': 'id-3' }, BODY, [NEW]],
		['no signature', { ...good, 'webhook-signature': undefined }, BODY, [NEW]],
		['no timestamp', { ...good, 'webhook-timestamp': undefined }, BODY, [NEW]],
		['a v2 entry only', { ...good, 'webhook-signature': good['webhook-signature'].replace('v1,', 'v2,') }, BODY, [NEW]],
		['no secret configured', good, BODY, []],
		['a garbled signature', { ...good, 'webhook-signature': 'v1,@@@' }, BODY, [NEW]],
	];
	for (const [name, headers, body, secrets] of cases) {
		const verdict = verify(secrets, headers, Buffer.from(body), now());
		assert.equal(verdict.ok, false, name);
		assert.ok(!verdict.ok && verdict.reason.length > 0, name);
	}
});

test('a replay outside the tolerance is refused, inside it verifies', () => {
	const tenMinutesAgo = new Date(Date.now() - 600_000);
	const old = signed(NEW, 'id-4', tenMinutesAgo);
	const verdict = verify([NEW], old, Buffer.from(BODY), now(), 300);
	assert.equal(verdict.ok, false);
	assert.match(!verdict.ok ? verdict.reason : '', /tolerance/);
	assert.equal(verify([NEW], old, Buffer.from(BODY), now(), 900).ok, true);
	const future = signed(NEW, 'id-5', new Date(Date.now() + 600_000));
	assert.equal(verify([NEW], future, Buffer.from(BODY), now(), 300).ok, false);
});

test('a secret that is not whsec_ base64 is an error, not a pass', () => {
	const good = signed(NEW, 'id-6', new Date());
	assert.throws(() => verify(['whsec_not*base64'], good, Buffer.from(BODY), now()), /whsec_/);
});
