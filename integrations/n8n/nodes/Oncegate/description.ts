import type { INodeProperties } from 'n8n-workflow';

import { effectProperties } from './effects';

/** The operations, in the order a workflow uses them. */
export const OPERATIONS = [
	'claim',
	'recordOutput',
	'requestApproval',
	'commit',
	'complete',
	'fail',
	'renew',
	'reportFailedExecution',
] as const;

const owner = ['complete', 'fail', 'renew', 'commit', 'recordOutput', 'requestApproval'];

export const properties: INodeProperties[] = [
	{
		displayName: 'Operation',
		name: 'operation',
		type: 'options',
		noDataExpression: true,
		options: [
			{
				name: 'Claim',
				value: 'claim',
				action: 'Claim a business key',
				description:
					'Claim a key before acting: exactly one execution gets Claimed; the others leave by Duplicate, In Flight or Ended',
			},
			{
				name: 'Commit Effects',
				value: 'commit',
				action: 'Commit effects through the outbox',
				description: 'Store the result and queue the effects oncegate sends once each',
			},
			{
				name: 'Complete',
				value: 'complete',
				action: 'Complete the run',
				description: 'Finish the run with the result duplicates will receive',
			},
			{
				name: 'Fail',
				value: 'fail',
				action: 'Fail the run',
				description: 'Retryable: a later claim takes it again. Terminal: it ends for an operator.',
			},
			{
				name: 'Record Model Output',
				value: 'recordOutput',
				action: 'Record and validate model output',
				description: 'Validate an AI step\'s output against the operation\'s schema before it can reach a gate',
			},
			{
				name: 'Renew',
				value: 'renew',
				action: 'Renew the lease',
				description: 'Extend the lease before a slow step; the item carries the new lease',
			},
			{
				name: 'Report Failed Execution',
				value: 'reportFailedExecution',
				action: 'Report a failed execution',
				description: 'In an Error Trigger workflow: fail every run the failed execution still holds',
			},
			{
				name: 'Request Approval',
				value: 'requestApproval',
				action: 'Request approval for effects',
				description: 'Put effects behind a person\'s decision; oncegate resumes the Wait node when they decide',
			},
		],
		default: 'claim',
	},

	// Claim
	{
		displayName: 'Namespace',
		name: 'namespace',
		type: 'string',
		required: true,
		displayOptions: { show: { operation: ['claim'] } },
		default: '',
		placeholder: 'orders',
		description: 'The provider or tenant the key belongs to',
	},
	{
		displayName: 'Key',
		name: 'key',
		type: 'string',
		required: true,
		displayOptions: { show: { operation: ['claim'] } },
		default: '',
		placeholder: 'create-shipment:{{ $json.body.order_id }}:v1',
		description:
			'The business action, not the execution: operation:object:version. Each item of a batch claims its own key.',
	},
	{
		displayName: 'Payload',
		name: 'payload',
		type: 'json',
		displayOptions: { show: { operation: ['claim'] } },
		default: '={{ $json.body ?? $json }}',
		description:
			'The fields that define the action. The same key with a different payload is refused as a payload conflict; leave out anything that changes between deliveries.',
	},
	{
		displayName: 'Options',
		name: 'claimOptions',
		type: 'collection',
		placeholder: 'Add Option',
		displayOptions: { show: { operation: ['claim'] } },
		default: {},
		options: [
			{
				displayName: 'Business Key',
				name: 'businessKey',
				type: 'string',
				default: '',
				description: 'An identity at most one run may hold across namespaces, such as payment:ch_3Nq',
			},
			{
				displayName: 'Correlation ID',
				name: 'correlationId',
				type: 'string',
				default: '',
				description:
					'Links the provider event, this execution and the effects. Default: the forward\'s, when the item came from the Oncegate Trigger.',
			},
			{
				displayName: 'Lease (Ms)',
				name: 'leaseMs',
				type: 'number',
				typeOptions: { minValue: 0 },
				default: 0,
				description: 'How long the claim holds before another may take it over; 0: oncegate\'s default',
			},
			{
				displayName: 'Operation Name',
				name: 'operation',
				type: 'string',
				default: '',
				description: 'The declared operation this run performs',
			},
			{
				displayName: 'Requested By',
				name: 'requestedBy',
				type: 'string',
				default: '',
				description: 'The person on whose behalf the workflow acts; they cannot approve their own request',
			},
			{
				displayName: 'Workflow Version',
				name: 'workflowVersion',
				type: 'string',
				default: '',
			},
		],
	},

	// Complete, commit
	{
		displayName: 'Result',
		name: 'result',
		type: 'json',
		displayOptions: { show: { operation: ['complete', 'commit'] } },
		default: '{}',
		description: 'What a duplicate receives on the Duplicate output of a later claim',
	},
	...effectProperties(['commit', 'requestApproval']),

	// Fail
	{
		displayName: 'Retryable',
		name: 'retryable',
		type: 'boolean',
		displayOptions: { show: { operation: ['fail'] } },
		default: true,
		description:
			'Whether a later claim may take the run again (failed_retryable); off: the run ends for an operator',
	},
	{
		displayName: 'Error',
		name: 'error',
		type: 'string',
		displayOptions: { show: { operation: ['fail'] } },
		default: '={{ $json.error?.message ?? $json.error ?? "" }}',
		description:
			'Why it failed. Control characters are removed and it is cut to 1,000 characters; keep secrets out of it.',
	},

	// Renew
	{
		displayName: 'Lease (Ms)',
		name: 'leaseMs',
		type: 'number',
		typeOptions: { minValue: 0 },
		displayOptions: { show: { operation: ['renew'] } },
		default: 0,
		description: 'The new lease length; 0: oncegate\'s default',
	},

	// Record model output
	{
		displayName: 'Output',
		name: 'output',
		type: 'json',
		displayOptions: { show: { operation: ['recordOutput'] } },
		default: '={{ $json }}',
		description: 'The model\'s output as JSON, checked against the operation\'s output schema',
	},
	{
		displayName: 'Operation Name',
		name: 'outputOperation',
		type: 'string',
		displayOptions: { show: { operation: ['recordOutput'] } },
		default: '',
		description: 'The operation whose schema applies; empty: the one the run was claimed for',
	},
	{
		displayName: 'Model Provider',
		name: 'providerClass',
		type: 'string',
		displayOptions: { show: { operation: ['recordOutput'] } },
		default: 'openai_compatible',
		description: 'The kind of model API, kept with the output for the audit',
	},
	{
		displayName: 'Model',
		name: 'model',
		type: 'string',
		displayOptions: { show: { operation: ['recordOutput'] } },
		default: '',
		placeholder: 'llama3.1:8b',
	},
	{
		displayName: 'Model Revision',
		name: 'revision',
		type: 'string',
		displayOptions: { show: { operation: ['recordOutput'] } },
		default: 'unknown',
	},

	// Request approval
	{
		displayName: 'Callback URL',
		name: 'callbackUrl',
		type: 'string',
		displayOptions: { show: { operation: ['requestApproval'] } },
		default: '={{ $execution.resumeUrl }}',
		description:
			'Where oncegate POSTs the decision: the resume URL of a Wait node set to Resume on Webhook Call. It must lie inside a target in oncegate\'s config.',
	},
	{
		displayName: 'Summary',
		name: 'summary',
		type: 'string',
		displayOptions: { show: { operation: ['requestApproval'] } },
		default: '',
		description: 'What the approver reads first',
	},

	// Report failed execution
	{
		displayName: 'Execution ID',
		name: 'executionRef',
		type: 'string',
		displayOptions: { show: { operation: ['reportFailedExecution'] } },
		default: '={{ $json.execution?.id }}',
		description: 'The failed execution\'s ID, from the Error Trigger',
	},
	{
		displayName: 'Error Message',
		name: 'errorMessage',
		type: 'string',
		displayOptions: { show: { operation: ['reportFailedExecution'] } },
		default:
			'={{ [$json.execution?.error?.message, $json.execution?.error?.description].filter(Boolean).join(": ") }}',
	},
	{
		displayName: 'Retryable',
		name: 'reportRetryable',
		type: 'boolean',
		displayOptions: { show: { operation: ['reportFailedExecution'] } },
		default: false,
		description:
			'Whether the runs become failed_retryable (a re-run takes them again); off: dead letters of class workflow_error for an operator',
	},
	{
		displayName: 'Failed Node',
		name: 'failedNode',
		type: 'string',
		displayOptions: { show: { operation: ['reportFailedExecution'] } },
		default: '={{ $json.execution?.lastNodeExecuted }}',
	},
];

/** The owner operations: they act on the run the item carries. */
export const OWNER_OPERATIONS = owner;
