/**
 * Effects a workflow asks oncegate to send (commit, request approval): from
 * the node's fields, or from a JSON array for effects built by an
 * expression. Field names are oncegate's (`operation`, `effect_type`,
 * `target`, `path`, `method`, `headers`, `body`).
 */
import type { IDataObject, INodeProperties } from 'n8n-workflow';

export interface EffectFields {
	operation?: string;
	effectType?: string;
	target?: string;
	path?: string;
	method?: string;
	body?: unknown;
	headers?: unknown;
	notBefore?: string;
	externalId?: string;
}

/** Parses a JSON parameter that n8n hands over as text or as a value. */
export function jsonValue(value: unknown, name: string): unknown {
	if (typeof value !== 'string') return value;
	const text = value.trim();
	if (text === '') return undefined;
	try {
		return JSON.parse(text);
	} catch (err) {
		throw new Error(`${name} is not valid JSON: ${(err as Error).message}`);
	}
}

/** One effect request from the node's fields. */
export function effectFromFields(f: EffectFields, index: number): IDataObject {
	const at = `Effect ${index + 1}`;
	for (const [name, value] of [
		['Operation', f.operation],
		['Effect Type', f.effectType],
		['Target', f.target],
	] as const) {
		if (!value) throw new Error(`${at}: ${name} is required`);
	}
	const effect: IDataObject = {
		operation: f.operation,
		effect_type: f.effectType,
		target: f.target,
	};
	if (f.path) effect.path = f.path;
	if (f.method && f.method !== 'POST') effect.method = f.method;
	const body = jsonValue(f.body, `${at}: Body`);
	if (body !== undefined) effect.body = body as IDataObject;
	const headers = jsonValue(f.headers, `${at}: Headers`);
	if (headers !== undefined && !(typeof headers === 'object' && Object.keys(headers as object).length === 0)) {
		effect.headers = headers as IDataObject;
	}
	if (f.notBefore) effect.not_before = f.notBefore;
	if (f.externalId) {
		effect.external_id = f.externalId.startsWith('/')
			? { pointer: f.externalId }
			: { header: f.externalId };
	}
	return effect;
}

/** The effects of a commit or an approval request. */
export function effects(mode: string, fields: EffectFields[], json: unknown): IDataObject[] {
	if (mode === 'json') {
		const parsed = jsonValue(json, 'Effects (JSON)');
		if (!Array.isArray(parsed)) throw new Error('Effects (JSON) must be an array of effects');
		return parsed as IDataObject[];
	}
	return fields.map(effectFromFields);
}

/** The parameters that describe effects, shown for `operations`. */
export function effectProperties(operations: string[]): INodeProperties[] {
	const show = { show: { operation: operations } };
	return [
		{
			displayName: 'Effects Input',
			name: 'effectsInput',
			type: 'options',
			displayOptions: show,
			options: [
				{ name: 'Fields', value: 'fields', description: 'One entry per effect' },
				{ name: 'JSON', value: 'json', description: 'An array built by an expression' },
			],
			default: 'fields',
		},
		{
			displayName: 'Effects',
			name: 'effects',
			type: 'fixedCollection',
			typeOptions: { multipleValues: true },
			placeholder: 'Add Effect',
			displayOptions: { show: { operation: operations, effectsInput: ['fields'] } },
			default: {},
			description:
				'What oncegate sends once on the run\'s behalf, with one idempotency key per effect on every attempt',
			options: [
				{
					name: 'effect',
					displayName: 'Effect',
					values: [
						{
							displayName: 'Body',
							name: 'body',
							type: 'json',
							default: '{}',
							description: 'The JSON body oncegate sends',
						},
						{
							displayName: 'Effect Type',
							name: 'effectType',
							type: 'string',
							default: '',
							placeholder: 'send_email',
							description: 'What kind of effect; unique per run and target',
						},
						{
							displayName: 'External ID',
							name: 'externalId',
							type: 'string',
							default: '',
							placeholder: 'X-Message-ID',
							description:
								'Where the target\'s answer names what it created: a response header, or a JSON pointer into the body (starting with /)',
						},
						{
							displayName: 'Headers',
							name: 'headers',
							type: 'json',
							default: '{}',
							description:
								'Non-secret headers. Credentials belong in the target\'s secret_headers in oncegate\'s config.',
						},
						{
							displayName: 'Method',
							name: 'method',
							type: 'options',
							options: [
								{ name: 'DELETE', value: 'DELETE' },
								{ name: 'PATCH', value: 'PATCH' },
								{ name: 'POST', value: 'POST' },
								{ name: 'PUT', value: 'PUT' },
							],
							default: 'POST',
						},
						{
							displayName: 'Not Before',
							name: 'notBefore',
							type: 'string',
							default: '',
							placeholder: '2030-01-01T09:00:00Z',
							description: 'Send no earlier than this time (RFC 3339); empty: as soon as allowed',
						},
						{
							displayName: 'Operation',
							name: 'operation',
							type: 'string',
							default: '',
							placeholder: 'create_shipment',
							description: 'An operation declared in oncegate\'s config; it decides the gate',
						},
						{
							displayName: 'Path',
							name: 'path',
							type: 'string',
							default: '',
							placeholder: '/shipments',
							description: 'A path under the target\'s base URL',
						},
						{
							displayName: 'Target',
							name: 'target',
							type: 'string',
							default: '',
							placeholder: 'warehouse',
							description: 'A target configured in oncegate (the allow-list)',
						},
					],
				},
			],
		},
		{
			displayName: 'Effects (JSON)',
			name: 'effectsJson',
			type: 'json',
			displayOptions: { show: { operation: operations, effectsInput: ['json'] } },
			default: '[]',
			description:
				'An array of {operation, effect_type, target, path, method, headers, body} objects',
		},
	];
}
